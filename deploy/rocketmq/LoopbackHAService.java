// Binds the Broker's replication listener (the HA port, listenPort + 1:
// 10912) to the same address as the rest of the Broker. RocketMQ 5.3.3
// binds it to every interface and has no setting for it; the Broker loads
// its HAService through RocketMQ's ServiceProvider, so this one is named
// in META-INF/service/org.apache.rocketmq.store.ha.HAService of the jar
// deploy/rocketmq.sh builds beside the fetched ones. Everything else is
// RocketMQ's own DefaultHAService.
package io.shardstock.rocketmq;

import java.io.IOException;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;

import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.DefaultHAService;

public class LoopbackHAService extends DefaultHAService {
    @Override
    public void init(DefaultMessageStore store) throws IOException {
        super.init(store);
        String host = System.getProperty("shardstock.ha.bind", "127.0.0.1");
        int port = store.getMessageStoreConfig().getHaListenPort();
        try {
            // The listen address is fixed in AcceptSocketService's
            // constructor; replace it before start() binds it.
            Field listen = DefaultHAService.AcceptSocketService.class.getDeclaredField("socketAddressListen");
            listen.setAccessible(true);
            listen.set(acceptSocketService, new InetSocketAddress(host, port));
        } catch (ReflectiveOperationException e) {
            throw new IOException("cannot bind the HA listener to " + host + ":" + port, e);
        }
    }
}
