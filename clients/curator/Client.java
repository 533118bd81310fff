// fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around Apache
// Curator's InterProcessMutex on ZooKeeper, as a Curator user writes it:
//   open    -> a CuratorFramework on the given endpoints, session timeout = ttl_ms,
//              ExponentialBackoffRetry(1000, 3) (Curator's own getting-started policy)
//   acquire -> new InterProcessMutex(client, lock).acquire()
//   release -> release();  close -> client.close()
// and ConnectionState.LOST becomes the session-lost event.
//
// stdout carries only protocol lines: System.out is pointed at stderr before any
// library class loads, so nothing Curator, ZooKeeper or SLF4J prints can reach it;
// the protocol writes to the original stdout, kept private here.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public final class Client {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** The real stdout: protocol lines only. */
    private static PrintStream proto;

    /** The worker's open must be answered within 10 s; leave room for the answer. */
    private static final long CONNECT_WAIT_MS = 6000;

    /**
     * InterProcessMutex keeps the node it created to itself; its protected
     * getLockPath() (Curator 5.x) is the one place that names it. A subclass is how a
     * Curator user who wants the node (for its sequence or czxid) gets at it.
     */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        /** The lock node this thread holds, or null. */
        String node() {
            return getLockPath();
        }
    }

    private CuratorFramework client;
    private long session;
    private Mutex mutex;

    public static void main(String[] args) throws Exception {
        proto = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        ObjectNode hello = JSON.createObjectNode();
        hello.put("fencecheck_client", 1);
        hello.put("library", library());
        send(hello);
        new Client().serve();
    }

    /** "Apache Curator 5.4.0 InterProcessMutex, ZooKeeper client 3.8.0", from the jars. */
    private static String library() {
        String curator = "?";
        try (InputStream in = InterProcessMutex.class.getResourceAsStream(
                "/META-INF/maven/org.apache.curator/curator-recipes/pom.properties")) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                curator = p.getProperty("version", "?");
            }
        } catch (Exception e) {
            log("cannot read Curator's version: " + e);
        }
        String zk = org.apache.zookeeper.Version.getFullVersion();
        // "3.8.0-<commit>, built on <date>": the release is enough.
        zk = zk.split("[-,]", 2)[0];
        return "Apache Curator " + curator + " InterProcessMutex, ZooKeeper client " + zk;
    }

    static void log(String msg) {
        System.err.println("[curator-client " + System.getenv("FENCECHECK_WORKER") + "] " + msg);
        System.err.flush();
    }

    /** One line on the protocol stream; the LOST listener writes from its own thread. */
    static synchronized void send(ObjectNode msg) {
        try {
            proto.print(JSON.writeValueAsString(msg) + "\n");
        } catch (Exception e) {
            log("cannot encode " + msg + ": " + e);
        }
        proto.flush();
    }

    private void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode req;
            try {
                req = JSON.readTree(line);
            } catch (Exception e) {
                log("not JSON from the worker, ignored: " + line);
                continue;
            }
            ObjectNode ans = JSON.createObjectNode();
            ans.set("id", req.get("id"));
            String op = req.path("op").asText();
            try {
                switch (op) {
                    case "open" -> open(req, ans);
                    case "acquire" -> acquire(req.path("lock").asText(), ans);
                    case "release" -> release(ans);
                    case "close" -> close(ans);
                    default -> fail(ans, "unknown op '" + op + "'");
                }
            } catch (Exception e) {
                log(op + " failed: " + e);
                fail(ans, e.toString());
            }
            send(ans);
        }
        log("stdin closed: closing the client and exiting");
        if (client != null) {
            client.close();
        }
        System.exit(0);
    }

    private static void fail(ObjectNode ans, String error) {
        ans.put("ok", false);
        ans.put("error", error);
    }

    private void open(JsonNode req, ObjectNode ans) throws Exception {
        // A new open ends the previous client (after a session loss Curator would
        // otherwise carry on under a session of its own choosing).
        if (client != null) {
            client.close();
            client = null;
            mutex = null;
        }
        List<String> endpoints = new ArrayList<>();
        req.path("endpoints").forEach(e -> endpoints.add(e.asText()));
        if (endpoints.isEmpty()) {
            fail(ans, "open without endpoints");
            return;
        }
        int ttl = req.path("ttl_ms").asInt(0);
        if (ttl <= 0) {
            fail(ans, "open without a positive ttl_ms");
            return;
        }
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(String.join(",", endpoints))
                .sessionTimeoutMs(ttl)
                // Curator lowers a connection timeout above the session timeout to it
                // (with a warning); say so up front.
                .connectionTimeoutMs(ttl)
                .retryPolicy(new ExponentialBackoffRetry(1000, 3))
                // Curator 5 otherwise reads the ensemble's config (/zookeeper/config)
                // and switches to the members' own client addresses, around the
                // worker's fault proxies; a Curator user behind a proxy or NAT turns
                // it off the same way.
                .ensembleTracker(false)
                .build();
        final long[] mine = {0};
        final boolean[] told = {false};
        c.getConnectionStateListenable().addListener((cf, state) -> {
            log("connection state " + state + " (session " + Long.toHexString(mine[0]) + ")");
            if (state == ConnectionState.LOST && !told[0] && mine[0] != 0) {
                told[0] = true;
                ObjectNode ev = JSON.createObjectNode();
                ev.put("event", "session-lost");
                ev.put("session", mine[0]);
                ev.put("reason", "Curator ConnectionState.LOST");
                send(ev);
            }
        });
        c.start();
        if (!c.blockUntilConnected((int) CONNECT_WAIT_MS, TimeUnit.MILLISECONDS)) {
            c.close();
            fail(ans, "not connected to " + endpoints + " within " + CONNECT_WAIT_MS + " ms");
            return;
        }
        long id = c.getZookeeperClient().getZooKeeper().getSessionId();
        mine[0] = id;
        client = c;
        session = id;
        log("open: session " + Long.toHexString(id) + " on " + endpoints + ", timeout "
                + ttl + " ms (negotiated "
                + c.getZookeeperClient().getZooKeeper().getSessionTimeout() + " ms)");
        ans.put("ok", true);
        ans.put("session", id);
    }

    private void acquire(String lock, ObjectNode ans) throws Exception {
        if (client == null) {
            fail(ans, "acquire without an open session");
            return;
        }
        if (mutex != null) {
            fail(ans, "acquire while holding " + mutex.node());
            return;
        }
        Mutex m = new Mutex(client, lock);
        m.acquire();
        mutex = m;
        String node = m.node();
        ans.put("ok", true);
        ans.put("entry", node);
        // The token a Curator user has at hand: the lock node's sequence number, in
        // the name the recipe created (no further round trip). It grows with every
        // node under this lock path, as long as the path is not deleted and made
        // again (Curator makes it a container node, which ZooKeeper removes once
        // empty). The czxid needs a stat after the grant: offered as an alternative.
        long seq = sequence(node);
        ans.put("token", seq);
        ObjectNode tokens = ans.putObject("tokens");
        tokens.put("sequence", seq);
        Stat st = null;
        try {
            st = client.checkExists().forPath(node);
        } catch (Exception e) {
            log("stat of " + node + " failed: " + e);
        }
        // The session Curator has now: after an expiry it made a new one by itself.
        long current = client.getZookeeperClient().getZooKeeper().getSessionId();
        if (st != null) {
            tokens.put("czxid", st.getCzxid());
            ans.put("revision", st.getCzxid());
            if (st.getEphemeralOwner() != current) {
                // CURATOR-604: acquire() returned on a node of a session Curator no
                // longer has (it ends with that session): the ground truth the
                // zoo's scenario is checked against.
                log("GRANTED ON A NODE OF ANOTHER SESSION: " + node + " is owned by "
                        + Long.toHexString(st.getEphemeralOwner()) + ", Curator's session is "
                        + Long.toHexString(current));
            }
            if (st.getEphemeralOwner() != session) {
                log("lock node " + node + " is owned by session "
                        + Long.toHexString(st.getEphemeralOwner()) + ", not the opened "
                        + Long.toHexString(session) + " (Curator made a new session)");
            }
        } else {
            log("lock node " + node + " gone right after the grant (session lost?)");
        }
        log("acquire " + lock + ": " + node + (st != null ? " czxid " + st.getCzxid() : ""));
    }

    /** The trailing digits of a sequential node's name ("..-lock-0000000042" -> 42). */
    static long sequence(String node) {
        int i = node.length();
        while (i > 0 && Character.isDigit(node.charAt(i - 1))) {
            i--;
        }
        return Long.parseLong(node.substring(i));
    }

    private void release(ObjectNode ans) throws Exception {
        if (mutex == null) {
            fail(ans, "release without a lock");
            return;
        }
        Mutex m = mutex;
        mutex = null; // a failed release leaves nothing to release again
        String node = m.node();
        m.release();
        log("release " + node);
        ans.put("ok", true);
    }

    private void close(ObjectNode ans) {
        if (client != null) {
            client.close();
            log("close: session " + Long.toHexString(session));
        }
        client = null;
        mutex = null;
        ans.put("ok", true);
    }
}
