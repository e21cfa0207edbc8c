// SPDX-License-Identifier: MIT
/*
 * Interoperability peer for dlock's ZooKeeper read-write lock tests: one
 * hold of Apache Curator's InterProcessReadWriteLock, read or write.
 * Run through bench/peers/curator-peer.sh (its classpath) with
 * CURATOR_PEER_SOURCE naming this file:
 *
 *   PEER try|hold read|write --server ADDR --resource /PATH
 *
 * try:  acquire without waiting; print "acquired" (then release) or "busy".
 * hold: acquire without waiting; print "held" or "busy"; when held, wait
 *       for a line on stdin, release, print "released".
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public class CuratorRwPeer {
	static void say(String word) {
		System.out.println(word);
		System.out.flush();
	}

	public static void main(String[] args) throws Exception {
		System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
		System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
		System.setProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn", "error");
		String server = null, path = null;
		for (int i = 2; i + 1 < args.length; i += 2) {
			if (args[i].equals("--server"))
				server = args[i + 1];
			else if (args[i].equals("--resource"))
				path = args[i + 1];
		}
		if (args.length < 2 || server == null || path == null) {
			System.err.println("usage: PEER try|hold read|write --server ADDR --resource /PATH");
			System.exit(64);
		}
		boolean hold = args[0].equals("hold");
		CuratorFramework client = CuratorFrameworkFactory.newClient(server, new RetryOneTime(500));
		client.start();
		if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
			System.err.println("CuratorRwPeer: no connection to " + server);
			System.exit(1);
		}
		InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
		InterProcessMutex lock = args[1].equals("read") ? rw.readLock() : rw.writeLock();
		boolean got = lock.acquire(0, TimeUnit.MILLISECONDS);
		say(!got ? "busy" : hold ? "held" : "acquired");
		if (got) {
			if (hold)
				new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
			lock.release();
			if (hold)
				say("released");
		}
		client.close();
	}
}
