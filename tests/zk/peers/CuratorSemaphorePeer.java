// SPDX-License-Identifier: MIT
/*
 * Interoperability peer for dlock's ZooKeeper semaphore tests: one lease
 * of Apache Curator's InterProcessSemaphoreV2 with a plain maxLeases.
 * Run through bench/peers/curator-peer.sh (its classpath) with
 * CURATOR_PEER_SOURCE naming this file:
 *
 *   PEER try|wait --server ADDR --resource /PATH --permits N
 *
 * try:  acquire without waiting; wait: up to 20 s.  Prints "held" (then
 *       holds until a line comes on stdin, returns the lease and prints
 *       "released") or "busy".
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorSemaphorePeer {
	static void say(String word) {
		System.out.println(word);
		System.out.flush();
	}

	public static void main(String[] args) throws Exception {
		System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
		System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
		System.setProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn", "error");
		String server = null, path = null;
		int permits = 0;
		for (int i = 1; i + 1 < args.length; i += 2) {
			if (args[i].equals("--server"))
				server = args[i + 1];
			else if (args[i].equals("--resource"))
				path = args[i + 1];
			else if (args[i].equals("--permits"))
				permits = Integer.parseInt(args[i + 1]);
		}
		if (args.length < 1 || server == null || path == null || permits < 1) {
			System.err.println("usage: PEER try|wait --server ADDR --resource /PATH --permits N");
			System.exit(64);
		}
		CuratorFramework client = CuratorFrameworkFactory.newClient(server, new RetryOneTime(500));
		client.start();
		if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
			System.err.println("CuratorSemaphorePeer: no connection to " + server);
			System.exit(1);
		}
		InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
		Lease lease = semaphore.acquire(args[0].equals("wait") ? 20000 : 0, TimeUnit.MILLISECONDS);
		say(lease == null ? "busy" : "held");
		if (lease != null) {
			new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
			semaphore.returnLease(lease);
			say("released");
		}
		client.close();
	}
}
