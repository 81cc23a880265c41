// Makes the Broker's users and ACLs (RocketMQ ACL 2.0) what deploy/rocketmq.sh
// says they are, on every start: each user is created, or updated to its
// current secret, and its ACL made exactly the grants given here (what is
// already right is left alone). It logs in as the super user that
// broker.conf's initAuthenticationUser created.
// Secrets are read from files (USER:SECRET, one line), never from the
// command line, which every local user can read in ps.
//
//   java -cp "CACHE/*" io.shardstock.rocketmq.AclSetup NAMESRV BROKER ADMIN-FILE \
//        --user FILE --grant RESOURCES ACTIONS [--grant ...] [--user ...]
//
// RESOURCES: comma-separated, e.g. Topic:shardstock_payments or Topic:*;
// ACTIONS: comma-separated, e.g. Pub,Sub,Create. Every grant allows; what
// no grant names is denied.
package io.shardstock.rocketmq;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.protocol.body.AclInfo;
import org.apache.rocketmq.remoting.protocol.body.UserInfo;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class AclSetup {
    private static boolean changed;

    private AclSetup() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            throw new IllegalArgumentException("usage: AclSetup NAMESRV BROKER ADMIN-FILE --user FILE --grant RESOURCES ACTIONS ...");
        }
        String namesrv = args[0], broker = args[1];
        String[] admin = credentials(args[2]);
        // Each user's grants: resource -> actions.
        Map<String, String[]> users = new LinkedHashMap<>();
        Map<String, Map<String, List<String>>> grants = new LinkedHashMap<>();
        String user = null;
        for (int i = 3; i < args.length; i++) {
            switch (args[i]) {
                case "--user":
                    String[] u = credentials(args[++i]);
                    user = u[0];
                    users.put(user, u);
                    grants.put(user, new TreeMap<>());
                    break;
                case "--grant":
                    if (user == null) {
                        throw new IllegalArgumentException("--grant before --user");
                    }
                    List<String> resources = list(args[++i]), actions = list(args[++i]);
                    for (String r : resources) {
                        grants.get(user).put(r, actions);
                    }
                    break;
                default:
                    throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        DefaultMQAdminExt ext = new DefaultMQAdminExt(new AclClientRPCHook(new SessionCredentials(admin[0], admin[1])), 10000);
        ext.setNamesrvAddr(namesrv);
        ext.setInstanceName("shardstock-acl-setup-" + ProcessHandle.current().pid());
        ext.start();
        try {
            for (String name : users.keySet()) {
                putUser(ext, broker, users.get(name));
                putAcl(ext, broker, "User:" + name, grants.get(name));
            }
            if (!changed) {
                System.out.println("rocketmq acl: users and grants as they were");
            }
        } finally {
            ext.shutdown();
        }
    }

    private static void putUser(DefaultMQAdminExt ext, String broker, String[] user) throws Exception {
        UserInfo existing = null;
        try {
            existing = ext.getUser(broker, user[0]);
        } catch (Exception e) {
            // not there yet
        }
        if (existing == null) {
            ext.createUser(broker, user[0], user[1], "Normal");
            System.out.println("rocketmq acl: user " + user[0] + " created");
            changed = true;
        } else if (!user[1].equals(existing.getPassword()) || !"Normal".equalsIgnoreCase(existing.getUserType())
            || !"enable".equalsIgnoreCase(existing.getUserStatus())) {
            ext.updateUser(broker, user[0], user[1], "Normal", "enable");
            System.out.println("rocketmq acl: user " + user[0] + " updated");
            changed = true;
        }
    }

    // putAcl makes subject's ACL exactly the grants, without a moment in
    // which a grant it keeps is missing (clients may be connected: a
    // restart of the Broker alone): what differs is granted anew (the
    // Broker's createAcl replaces a resource's entry), then what is no
    // longer granted is deleted. An ACL already right is left alone.
    private static void putAcl(DefaultMQAdminExt ext, String broker, String subject, Map<String, List<String>> want) throws Exception {
        Map<String, String> have = new TreeMap<>();
        try {
            AclInfo acl = ext.getAcl(broker, subject);
            if (acl != null && acl.getPolicies() != null) {
                for (AclInfo.PolicyInfo p : acl.getPolicies()) {
                    for (AclInfo.PolicyEntryInfo e : p.getEntries()) {
                        have.put(e.getResource(), key(e.getActions(), e.getDecision(), e.getSourceIps()));
                    }
                }
            }
        } catch (Exception e) {
            // none yet
        }
        for (Map.Entry<String, List<String>> g : want.entrySet()) {
            if (!key(g.getValue(), "Allow", null).equals(have.get(g.getKey()))) {
                ext.createAcl(broker, subject, new ArrayList<>(List.of(g.getKey())), g.getValue(), new ArrayList<>(), "Allow");
                System.out.println("rocketmq acl: " + subject + " may " + g.getValue() + " on " + g.getKey());
                changed = true;
            }
        }
        for (String r : have.keySet()) {
            if (!want.containsKey(r)) {
                ext.deleteAcl(broker, subject, r);
                System.out.println("rocketmq acl: " + subject + " no longer has " + r);
                changed = true;
            }
        }
    }

    // key is a grant's comparable form: its actions (any order, any case),
    // its decision, and that it names no source address.
    private static String key(List<String> actions, String decision, List<String> sourceIps) {
        TreeSet<String> a = new TreeSet<>();
        if (actions != null) {
            for (String s : actions) {
                a.add(s.toLowerCase(Locale.ROOT));
            }
        }
        boolean anyIp = sourceIps == null || sourceIps.isEmpty();
        return a + " " + String.valueOf(decision).toLowerCase(Locale.ROOT) + (anyIp ? "" : " " + sourceIps);
    }

    // credentials reads USER:SECRET from the first line of a file.
    private static String[] credentials(String file) throws Exception {
        String line = new String(Files.readAllBytes(Paths.get(file)), StandardCharsets.UTF_8).trim();
        int colon = line.indexOf(':');
        if (colon <= 0 || colon == line.length() - 1) {
            throw new IllegalArgumentException(file + " does not hold USER:SECRET");
        }
        return new String[] {line.substring(0, colon), line.substring(colon + 1)};
    }

    private static List<String> list(String csv) {
        return new ArrayList<>(Arrays.asList(csv.split(",")));
    }
}
