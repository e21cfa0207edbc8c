/*
 * An Apache Curator peer for dlock's ZooKeeper interoperability tests.
 *
 * usage: java CuratorPeer HOSTS PATH try|hold
 *
 * The lock is Curator's InterProcessMutex on PATH.
 * try:  acquire without waiting; print "acquired" (then release) or "busy".
 * hold: acquire without waiting; print "held" or "busy"; when held, wait
 *       for a line on stdin, release, print "released".
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorPeer {
	public static void main(String[] args) throws Exception {
		String hosts = args[0], path = args[1], mode = args[2];
		CuratorFramework client = CuratorFrameworkFactory.newClient(hosts, 10000, 10000,
		                                                            new RetryNTimes(3, 200));
		client.start();
		client.blockUntilConnected(20, TimeUnit.SECONDS);
		InterProcessMutex lock = new InterProcessMutex(client, path);
		boolean got = lock.acquire(0, TimeUnit.MILLISECONDS);
		int status = 0;
		if (mode.equals("try")) {
			System.out.println(got ? "acquired" : "busy");
			System.out.flush();
			if (got)
				lock.release();
		} else if (mode.equals("hold")) {
			System.out.println(got ? "held" : "busy");
			System.out.flush();
			if (got) {
				new BufferedReader(new InputStreamReader(System.in)).readLine();
				lock.release();
				System.out.println("released");
				System.out.flush();
			}
		} else {
			System.out.println("unknown mode " + mode);
			status = 64;
		}
		client.close();
		System.exit(status);
	}
}
