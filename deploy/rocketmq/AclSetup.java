// Makes the Broker's users and ACLs (RocketMQ ACL 2.0) what deploy/rocketmq.sh
// says they are, on every start: each user is created, or updated to its
// current secret, and its ACL is replaced by the grants given here. It logs
// in as the super user that broker.conf's initAuthenticationUser created.
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
import java.util.List;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.protocol.body.UserInfo;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class AclSetup {
    private AclSetup() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            throw new IllegalArgumentException("usage: AclSetup NAMESRV BROKER ADMIN-FILE --user FILE --grant RESOURCES ACTIONS ...");
        }
        String namesrv = args[0], broker = args[1];
        String[] admin = credentials(args[2]);
        DefaultMQAdminExt ext = new DefaultMQAdminExt(new AclClientRPCHook(new SessionCredentials(admin[0], admin[1])), 10000);
        ext.setNamesrvAddr(namesrv);
        ext.setInstanceName("shardstock-acl-setup-" + ProcessHandle.current().pid());
        ext.start();
        try {
            String[] user = null;
            boolean first = true;
            for (int i = 3; i < args.length; i++) {
                switch (args[i]) {
                    case "--user":
                        user = credentials(args[++i]);
                        putUser(ext, broker, user);
                        first = true;
                        break;
                    case "--grant":
                        if (user == null) {
                            throw new IllegalArgumentException("--grant before --user");
                        }
                        String subject = "User:" + user[0];
                        if (first) {
                            // Replace, not merge: drop what an earlier
                            // start granted before granting anew.
                            try {
                                ext.deleteAcl(broker, subject, null);
                            } catch (Exception e) {
                                // none yet
                            }
                            first = false;
                        }
                        List<String> resources = list(args[++i]), actions = list(args[++i]);
                        ext.createAcl(broker, subject, resources, actions, new ArrayList<>(), "Allow");
                        System.out.println("rocketmq acl: " + user[0] + " may " + actions + " on " + resources);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown argument " + args[i]);
                }
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
        } else {
            ext.updateUser(broker, user[0], user[1], "Normal", "enable");
        }
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
