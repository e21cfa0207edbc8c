// SPDX-License-Identifier: MIT
/*
 * Peer driver: Apache Curator's InterProcessMutex (Curator 5.4, ZooKeeper
 * 3.8 client) on a CuratorFramework from CuratorFrameworkFactory.newClient
 * with RetryOneTime.  Same command line and JSON output as the Python peer
 * drivers beside it (see peer_common.py for the workloads in full):
 *
 *   PEER latency    --server ADDR --resource NAME --warmup N --count N
 *   PEER throughput --server ADDR --resource-prefix NAME --resources R --threads T --seconds S
 *   PEER handoff    --server ADDR --resource NAME --count N
 *   PEER try|hold   --server ADDR --resource /PATH
 *
 * ADDR is a ZooKeeper connect string, 127.0.0.1:P1[,127.0.0.1:P2...]; the
 * lock of NAME is /bench-peers/NAME, or NAME itself if it is an absolute
 * path (the interoperability tests lock dlock's own nodes, /dlock/...).
 * Curator creates that node and its parents (as container nodes) and a
 * sequential ephemeral child per acquire; at the end of a benchmark mode
 * this driver deletes the lock nodes and their empty parents up to
 * /bench-peers.  try and hold are the interoperability tests' modes, as in
 * peer_common.py.  Throughput threads share the one CuratorFramework
 * (thread-safe), each with its own InterProcessMutex per resource.
 *
 * Run it with bench/peers/curator-peer.sh ARGS, which does, in Java's
 * source-file mode (no build step; the source is compiled in memory at
 * each start, which costs a second or two before any measurement):
 *
 *   CP=/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:\
 *   /usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar:\
 *   /usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:\
 *   /usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar
 *   java -Xms64m -Xmx256m -XX:+UseSerialGC -cp "$CP" bench/peers/CuratorPeer.java ARGS
 *
 * (Debian packages libcurator-recipes-java, libslf4j-java, OpenJDK 11+.)
 * Logging goes through slf4j-simple to stderr at WARN, so stdout carries
 * only the JSON line.  handoff re-runs this same command line, with the
 * hidden mode handoff-waiter, as the waiter's JVM.
 */
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.KeeperException;

public class CuratorPeer {
	static final String PEER = "curator";
	static final String ROOT = "/bench-peers";
	static final long ACQUIRE_TIMEOUT_S = 30;   // any blocking acquire longer than this fails
	static final long CONNECT_TIMEOUT_S = 15;
	static final long HANDOFF_HOLD_MS = 20;     // the holder keeps the lock this long so the waiter blocks
	static final long WARMUP_MS = 1000;         // throughput: not counted

	static final String USAGE =
		"usage: PEER latency    --server ADDR --resource NAME --warmup N --count N\n" +
		"       PEER throughput --server ADDR --resource-prefix NAME --resources R --threads T --seconds S\n" +
		"       PEER handoff    --server ADDR --resource NAME --count N\n" +
		"       PEER try|hold   --server ADDR --resource NAME";

	static final Map<String, List<String>> MODES = Map.of(
		"latency", List.of("server", "resource", "warmup", "count"),
		"throughput", List.of("server", "resource-prefix", "resources", "threads", "seconds"),
		"handoff", List.of("server", "resource", "count"),
		"handoff-waiter", List.of("server", "resource"),
		"try", List.of("server", "resource"),
		"hold", List.of("server", "resource"));

	/** Modes that clean up the locks' leftovers on the server at the end. */
	static final List<String> CLEANUP_MODES = List.of("latency", "throughput", "handoff");

	static class UsageError extends Exception {
		UsageError(String message) { super(message); }
	}

	/** A failure, named by the step it happened in. */
	static class PeerError extends Exception {
		PeerError(String message) { super(message); }
	}

	interface Body { void run() throws Exception; }

	static void step(String what, Body body) throws PeerError {
		try {
			body.run();
		} catch (PeerError e) {
			throw e;
		} catch (Exception e) {
			throw new PeerError(what + ": " + describe(e));
		}
	}

	static String describe(Throwable e) {
		return e instanceof PeerError ? e.getMessage() : e.getClass().getSimpleName() + ": " + e.getMessage();
	}

	/* ---- command line ---- */

	static String mode;
	static final Map<String, String> opts = new LinkedHashMap<>();

	static void parseArgs(String[] args) throws UsageError {
		if (args.length == 0)
			throw new UsageError("no mode");
		mode = args[0];
		List<String> spec = MODES.get(mode);
		if (spec == null)
			throw new UsageError("unknown mode '" + mode + "'");
		for (int i = 1; i < args.length; i += 2) {
			String name = args[i].startsWith("--") ? args[i].substring(2) : "";
			if (i + 1 >= args.length || !spec.contains(name))
				throw new UsageError("unexpected argument '" + args[i] + "' for " + mode);
			opts.put(name, args[i + 1]);
		}
		List<String> missing = new ArrayList<>();
		for (String name : spec)
			if (!opts.containsKey(name))
				missing.add("--" + name);
		if (!missing.isEmpty())
			throw new UsageError(mode + ": missing " + String.join(" ", missing));
		for (String name : List.of("warmup", "count", "resources", "threads"))
			if (opts.containsKey(name))
				intOpt(name, name.equals("warmup") ? 0 : 1);
		if (opts.containsKey("seconds"))
			secondsOpt();
	}

	static int intOpt(String name, int minimum) throws UsageError {
		int value;
		try {
			value = Integer.parseInt(opts.get(name));
		} catch (NumberFormatException e) {
			throw new UsageError("--" + name + ": not a number: '" + opts.get(name) + "'");
		}
		if (value < minimum)
			throw new UsageError("--" + name + ": must be at least " + minimum);
		return value;
	}

	static double secondsOpt() throws UsageError {
		double value;
		try {
			value = Double.parseDouble(opts.get("seconds"));
		} catch (NumberFormatException e) {
			throw new UsageError("--seconds: not a number: '" + opts.get("seconds") + "'");
		}
		if (!(value >= 0.001) || Double.isInfinite(value))
			throw new UsageError("--seconds: must be at least 0.001");
		return value;
	}

	/* ---- the lock ---- */

	static String lockPath(String name) {
		if (name.startsWith("/"))
			return name;
		return ROOT + "/" + name.replaceAll("^/+|/+$", "");
	}

	static class Lock {
		final String path;
		final InterProcessMutex mutex;

		Lock(CuratorFramework client, String name) {
			path = lockPath(name);
			mutex = new InterProcessMutex(client, path);
		}

		void acquire() throws Exception {
			if (!mutex.acquire(ACQUIRE_TIMEOUT_S, TimeUnit.SECONDS))
				throw new PeerError("acquire " + path + ": not acquired within " + ACQUIRE_TIMEOUT_S + " s");
		}

		boolean tryAcquire() throws Exception {
			return mutex.acquire(0, TimeUnit.MILLISECONDS);
		}

		void release() throws Exception {
			mutex.release();
		}
	}

	static CuratorFramework connect(String server) throws Exception {
		CuratorFramework client = CuratorFrameworkFactory.newClient(server, new RetryOneTime(500));
		client.start();
		if (!client.blockUntilConnected((int) CONNECT_TIMEOUT_S, TimeUnit.SECONDS)) {
			client.close();
			throw new PeerError("connect to " + server + ": not connected within " + CONNECT_TIMEOUT_S + " s");
		}
		return client;
	}

	/** Delete each lock node and its empty parents up to ROOT; a node still in use is left alone. */
	static void cleanup(CuratorFramework client, List<String> names) throws Exception {
		for (String name : names) {
			for (String path = lockPath(name); path.startsWith(ROOT); path = path.substring(0, path.lastIndexOf('/'))) {
				try {
					client.delete().forPath(path);
				} catch (KeeperException.NoNodeException e) {
					// already gone
				} catch (KeeperException.NotEmptyException e) {
					break;
				}
			}
		}
	}

	/* ---- output ---- */

	static String us(double ns) {
		return String.format(Locale.ROOT, "%.1f", ns / 1000.0);
	}

	/** mean and percentiles; percentile q is the sorted sample at index floor(n*q), clamped to n-1. */
	static String summary(long[] samples) {
		long[] s = samples.clone();
		Arrays.sort(s);
		int n = s.length;
		double sum = 0;
		for (long x : s)
			sum += x;
		StringBuilder out = new StringBuilder();
		out.append("\"mean_us\": ").append(us(sum / n));
		double[] qs = {0.50, 0.99, 0.999};
		String[] keys = {"p50_us", "p99_us", "p999_us"};
		for (int i = 0; i < qs.length; i++)
			out.append(", \"").append(keys[i]).append("\": ").append(us(s[Math.min((int) (n * qs[i]), n - 1)]));
		return out.toString();
	}

	static void emit(String fields) {
		System.out.println("{\"peer\": \"" + PEER + "\", \"mode\": \"" + mode + "\", " + fields + "}");
		System.out.flush();
	}

	/* ---- workloads ---- */

	static void latency(CuratorFramework client) throws Exception {
		int warmup = intOpt("warmup", 0), count = intOpt("count", 1);
		Lock lock = new Lock(client, opts.get("resource"));
		step("warm-up acquire/release", () -> {
			for (int i = 0; i < warmup; i++) {
				lock.acquire();
				lock.release();
			}
		});
		long[] samples = new long[count];
		step("measured acquire/release", () -> {
			for (int i = 0; i < count; i++) {
				long t0 = System.nanoTime();
				lock.acquire();
				lock.release();
				samples[i] = System.nanoTime() - t0;
			}
		});
		emit("\"count\": " + count + ", " + summary(samples));
	}

	static void throughput(CuratorFramework client) throws Exception {
		int nThreads = intOpt("threads", 1), nRes = intOpt("resources", 1);
		double seconds = secondsOpt();
		List<String> names = namesUsed();
		LongAdder ops = new LongAdder();
		Queue<String> errors = new ConcurrentLinkedQueue<>();
		CountDownLatch stop = new CountDownLatch(1);
		List<Thread> threads = new ArrayList<>();
		for (int t = 0; t < nThreads; t++) {
			final int id = t;
			Thread thread = new Thread(() -> {
				// Thread id visits resources id, id+1, id+2, ... (mod R).
				try {
					List<Lock> locks = new ArrayList<>();
					for (String name : names)
						locks.add(new Lock(client, name));
					for (long k = id; stop.getCount() > 0; k++) {
						Lock lock = locks.get((int) (k % nRes));
						lock.acquire();
						lock.release();
						ops.increment();
					}
				} catch (Exception e) {
					errors.add("thread " + id + ": " + describe(e));
					stop.countDown();
				}
			});
			thread.setDaemon(true);
			threads.add(thread);
			thread.start();
		}
		stop.await(WARMUP_MS, TimeUnit.MILLISECONDS);
		long ops0 = ops.sum(), t0 = System.nanoTime();
		stop.await((long) (seconds * 1e9), TimeUnit.NANOSECONDS);
		long ops1 = ops.sum(), t1 = System.nanoTime();
		stop.countDown();
		for (Thread thread : threads)
			thread.join((ACQUIRE_TIMEOUT_S + 10) * 1000);
		if (!errors.isEmpty())
			throw new PeerError(String.join("; ", errors));
		for (Thread thread : threads)
			if (thread.isAlive())
				throw new PeerError("a thread did not finish");
		String secondsText = seconds == Math.rint(seconds) ? Long.toString((long) seconds) : Double.toString(seconds);
		emit("\"threads\": " + nThreads + ", \"resources\": " + nRes + ", \"seconds\": " + secondsText +
			", \"ops\": " + (ops1 - ops0) + ", \"ops_per_s\": " +
			String.format(Locale.ROOT, "%.1f", (ops1 - ops0) / ((t1 - t0) / 1e9)));
	}

	/** This JVM's own command line with the program arguments replaced. */
	static List<String> selfCommand(String[] ownArgs, String... newArgs) throws PeerError {
		ProcessHandle.Info info = ProcessHandle.current().info();
		String[] all = info.arguments().orElse(null);
		if (info.command().isEmpty() || all == null || all.length < ownArgs.length)
			throw new PeerError("cannot read this JVM's command line to start the waiter");
		List<String> cmd = new ArrayList<>();
		cmd.add(info.command().get());
		cmd.addAll(Arrays.asList(all).subList(0, all.length - ownArgs.length));
		cmd.addAll(Arrays.asList(newArgs));
		return cmd;
	}

	/*
	 * The holder (this JVM) and a waiter (a second JVM, same command line,
	 * mode handoff-waiter) pass the lock back and forth.  Per round: the
	 * holder writes "go", the waiter blocks in acquire, the holder waits
	 * HANDOFF_HOLD_MS, notes the time and releases; the waiter notes the time
	 * it got the lock, releases and writes that time back; the holder takes
	 * the lock again, uncontended, before the next "go".
	 */
	static void handoff(CuratorFramework client, String[] ownArgs) throws Exception {
		int count = intOpt("count", 1);
		Lock lock = new Lock(client, opts.get("resource"));
		step("holder acquire", lock::acquire);
		ProcessBuilder pb = new ProcessBuilder(selfCommand(ownArgs, "handoff-waiter",
			"--server", opts.get("server"), "--resource", opts.get("resource")));
		pb.redirectError(ProcessBuilder.Redirect.INHERIT);
		Process waiter = pb.start();
		boolean held = true;
		long[] samples = new long[count];
		try (BufferedReader in = new BufferedReader(new InputStreamReader(waiter.getInputStream(), StandardCharsets.UTF_8));
		     Writer out = new OutputStreamWriter(waiter.getOutputStream(), StandardCharsets.UTF_8)) {
			if (!"ready".equals(fromWaiter(in, waiter)))
				throw new PeerError("the waiter did not say ready");
			for (int i = 0; i < count; i++) {
				out.write("go\n");
				out.flush();
				Thread.sleep(HANDOFF_HOLD_MS);
				long tRelease = System.nanoTime();
				step("holder release", lock::release);
				held = false;
				String reply = fromWaiter(in, waiter);
				try {
					samples[i] = Long.parseLong(reply) - tRelease;
				} catch (NumberFormatException e) {
					throw new PeerError("the waiter said '" + reply + "'");
				}
				if (i + 1 < count) {
					step("holder re-acquire", lock::acquire);
					held = true;
				}
			}
			out.close();
			if (!waiter.waitFor(ACQUIRE_TIMEOUT_S, TimeUnit.SECONDS))
				throw new PeerError("the waiter did not exit");
			if (waiter.exitValue() != 0)
				throw new PeerError("the waiter exited with " + waiter.exitValue());
		} finally {
			if (waiter.isAlive()) {
				waiter.destroyForcibly();
				waiter.waitFor();
			}
			if (held)
				step("holder release", lock::release);
		}
		emit("\"count\": " + count + ", " + summary(samples));
	}

	static String fromWaiter(BufferedReader in, Process waiter) throws Exception {
		String line = in.readLine();
		if (line == null)
			throw new PeerError("the waiter process ended early (exit status " + waiter.waitFor() + ")");
		return line.trim();
	}

	static void handoffWaiter(CuratorFramework client) throws Exception {
		Lock lock = new Lock(client, opts.get("resource"));
		BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
		System.out.println("ready");
		System.out.flush();
		for (String line; (line = in.readLine()) != null && line.trim().equals("go"); ) {
			step("waiter acquire", lock::acquire);
			long tAcquired = System.nanoTime();
			step("waiter release", lock::release);
			System.out.println(tAcquired);
			System.out.flush();
		}
	}

	/** Whether acquiring the lock without waiting got it. */
	static boolean tryStep(Lock lock) throws PeerError {
		boolean[] got = {false};
		step("try acquire", () -> got[0] = lock.tryAcquire());
		return got[0];
	}

	static void tryOnce(CuratorFramework client) throws Exception {
		Lock lock = new Lock(client, opts.get("resource"));
		boolean got = tryStep(lock);
		System.out.println(got ? "acquired" : "busy");
		System.out.flush();
		if (got)
			step("release", lock::release);
	}

	static void hold(CuratorFramework client) throws Exception {
		Lock lock = new Lock(client, opts.get("resource"));
		boolean got = tryStep(lock);
		System.out.println(got ? "held" : "busy");
		System.out.flush();
		if (got) {
			new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
			step("release", lock::release);
			System.out.println("released");
			System.out.flush();
		}
	}

	static List<String> namesUsed() throws UsageError {
		if (!mode.equals("throughput"))
			return List.of(opts.get("resource"));
		List<String> names = new ArrayList<>();
		for (int r = 0, n = intOpt("resources", 1); r < n; r++)
			names.add(opts.get("resource-prefix") + "/" + r);
		return names;
	}

	public static void main(String[] args) throws Exception {
		// Before any logger exists: slf4j-simple, WARN and up, to stderr.
		if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null)
			System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
		System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
		// ZooKeeper 3.8 warns, with a stack trace, at every close() that the
		// server closed the socket first: expected, so not worth a line.
		System.setProperty("org.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn", "error");
		try {
			parseArgs(args);
		} catch (UsageError e) {
			System.err.println(PEER + ": " + e.getMessage() + "\n" + USAGE);
			System.exit(64);
		}
		CuratorFramework[] client = {null};
		int status = 0;
		try {
			step("connect to " + opts.get("server"), () -> client[0] = connect(opts.get("server")));
			switch (mode) {
			case "latency": latency(client[0]); break;
			case "throughput": throughput(client[0]); break;
			case "handoff": handoff(client[0], args); break;
			case "try": tryOnce(client[0]); break;
			case "hold": hold(client[0]); break;
			default: handoffWaiter(client[0]); break;
			}
		} catch (Exception e) {
			System.err.println(PEER + ": " + mode + ": " + describe(e));
			status = 1;
		}
		if (client[0] != null) {
			try {
				if (CLEANUP_MODES.contains(mode))  // the handoff holder cleans up after both
					step("cleanup", () -> cleanup(client[0], namesUsed()));
				step("close", client[0]::close);
			} catch (Exception e) {
				System.err.println(PEER + ": " + mode + ": " + describe(e));
				status = 1;
			}
		}
		System.exit(status);
	}
}
