// SPDX-License-Identifier: MIT
/*
 * Interoperability peer for dlock's ZooKeeper leader election tests: one
 * participant of Apache Curator's LeaderSelector.  Run through
 * bench/peers/curator-peer.sh (its classpath) with CURATOR_PEER_SOURCE
 * naming this file:
 *
 *   PEER --server ADDR --resource /PATH --id ID
 *
 * Prints "started" once it campaigns and "leader ID" when it leads; then
 * leads until a line comes on stdin, gives leadership up and prints
 * "resigned".
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.retry.RetryOneTime;

public class CuratorElectionPeer {
	static void say(String word) {
		System.out.println(word);
		System.out.flush();
	}

	public static void main(String[] args) throws Exception {
		System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
		System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
		System.setProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn", "error");
		String server = null, path = null, id = null;
		for (int i = 0; i + 1 < args.length; i += 2) {
			if (args[i].equals("--server"))
				server = args[i + 1];
			else if (args[i].equals("--resource"))
				path = args[i + 1];
			else if (args[i].equals("--id"))
				id = args[i + 1];
		}
		if (server == null || path == null || id == null) {
			System.err.println("usage: PEER --server ADDR --resource /PATH --id ID");
			System.exit(64);
		}
		CuratorFramework client = CuratorFrameworkFactory.newClient(server, new RetryOneTime(500));
		client.start();
		if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
			System.err.println("CuratorElectionPeer: no connection to " + server);
			System.exit(1);
		}
		final String me = id;
		final CountDownLatch done = new CountDownLatch(1);
		LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
			@Override
			public void takeLeadership(CuratorFramework c) throws Exception {
				say("leader " + me);
				new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
				done.countDown();
			}
		});
		selector.setId(id);
		selector.start();
		say("started");
		done.await();
		/* takeLeadership() has returned: let the selector delete its node
		 * before close() interrupts it. */
		for (int i = 0; i < 500 && me.equals(selector.getLeader().getId()); i++)
			Thread.sleep(20);
		selector.close();
		say("resigned");
		client.close();
	}
}
