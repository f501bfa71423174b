// Every child process of the tests (serve, the CLI, openssl, pg_dump, curl, nghttpd, Scripts/...) starts here,
// through posix_spawn, never through Foundation's Process: the toolchain's Foundation (6.3.1) reads past a `readdir`
// record of /proc/self/fd while it spawns (swift-corelibs-foundation pull request 5472), which crashed whole test
// runs with signal 11 in memcpy now and then, more often with many descriptors open, and serializing the launches
// did not cure it. Here the child closes every descriptor above 2 itself (closefrom, in the kernel), so nothing
// needs a lock and no child holds another's pipe or socket; its standard streams come from files or /dev/null, so
// no pipe can fill up and no end of file waits on a stray copy of a descriptor. A thread of its own per child
// waits for the exit (waitid blocks), so nothing waits on Swift's cooperative pool.
import Foundation
import Synchronization

/// A child process of a test, started with posix_spawn and reaped by a thread of its own.
public final class ChildProcess: Sendable {
    /// Where the child's standard input comes from.
    public enum Input: Sendable {
        /// /dev/null.
        case null
        /// These bytes, then end of file.
        case bytes([UInt8])
    }

    /// Where one of the child's output streams goes.
    public enum Output: Sendable {
        /// A file of the child's own, read through `stdout` or `stderr` (removed with the `ChildProcess`).
        case captured
        /// /dev/null.
        case discarded
        /// Appended to the file at this path (created if missing).
        case file(String)
        /// The test process's own stream.
        case inherited
        /// Standard error only: wherever standard output goes (the two interleaved as written).
        case standardOutput
    }

    /// A finished child: its status (as `terminationStatus`) and what it wrote to captured streams.
    public struct Outcome: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// A spawn that failed before the child ran (no such program, a bad working directory).
    public struct SpawnFailure: Error, CustomStringConvertible {
        public let executable: String
        public let code: Int32
        public var description: String { "cannot start \(executable): \(String(cString: strerror(code)))" }
    }

    /// The raw wait status once the child has been reaped; shared with the reaper thread, never `self`.
    private final class Reaped: Sendable {
        let status = Mutex<Int32?>(nil)
    }

    public let processIdentifier: pid_t
    private let reaped = Reaped()
    private let exited = DispatchGroup()
    /// The folder of the captured streams and the input file, when there are any.
    private let folder: URL?
    private let stdoutPath: String?
    private let stderrPath: String?
    /// Given the captured output when the test lets go of the child (before it is deleted).
    private let outputCheck: (@Sendable (String) -> Void)?

    /// Starts `executable` (a path, or a name looked up on PATH) with `arguments`, in `directory` (the test
    /// process's own without it) with `environment` (the test process's without it). `checkingOutput` is given the
    /// captured stdout and stderr when the child is released.
    public init(
        _ executable: String, _ arguments: [String] = [], environment: [String: String]? = nil, directory: String? = nil,
        input: Input = .null, stdout: Output = .captured, stderr: Output = .captured,
        checkingOutput: (@Sendable (String) -> Void)? = nil
    ) throws {
        outputCheck = checkingOutput
        let needsFolder: Bool
        switch (input, stdout, stderr) {
        case (.bytes, _, _), (_, .captured, _), (_, _, .captured): needsFolder = true
        default: needsFolder = false
        }
        let folder = needsFolder ? FileManager.default.temporaryDirectory.appending(path: "marquee-child-\(UUID().uuidString)") : nil
        if let folder { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) }
        func capturePath(_ output: Output, _ name: String) -> String? {
            guard case .captured = output else { return nil }
            return folder?.appending(path: name).path
        }
        let stdoutPath = capturePath(stdout, "stdout")
        let stderrPath = capturePath(stderr, "stderr")
        self.folder = folder
        self.stdoutPath = stdoutPath
        self.stderrPath = stderrPath

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        switch input {
        case .null:
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        case .bytes(let bytes):
            let path = folder!.appending(path: "stdin").path
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            posix_spawn_file_actions_addopen(&actions, 0, path, O_RDONLY, 0)
        }
        for (descriptor, output, captured) in [(Int32(1), stdout, stdoutPath), (Int32(2), stderr, stderrPath)] {
            switch output {
            case .captured: posix_spawn_file_actions_addopen(&actions, descriptor, captured!, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            case .discarded: posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_WRONLY, 0)
            case .file(let path): posix_spawn_file_actions_addopen(&actions, descriptor, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .inherited: break
            case .standardOutput: posix_spawn_file_actions_adddup2(&actions, 1, descriptor)
            }
        }
        Self.closeFrom(&actions, 3)
        if let directory { try Self.changeDirectory(&actions, directory) }

        // The child starts with every signal at its default and none blocked, whatever the test process set.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environment = environment ?? ProcessInfo.processInfo.environment
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, executable, &actions, &attributes, argv, envp)
        guard spawned == 0 else {
            if let folder { try? FileManager.default.removeItem(at: folder) }
            throw SpawnFailure(executable: executable, code: spawned)
        }
        processIdentifier = pid
        exited.enter()
        Thread.detachNewThread { [reaped, exited, pid] in
            // Waits without reaping, then reaps under the lock that `signal` takes: a signal never reaches a
            // process that took over the number of a child already reaped.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            reaped.status.withLock { status in
                var raw: Int32 = 0
                while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
                status = raw
            }
            exited.leave()
        }
    }

    /// Runs a child to completion and returns its outcome; waits on the child's own thread, never on the
    /// cooperative pool.
    public static func run(
        _ executable: String, _ arguments: [String] = [], environment: [String: String]? = nil, directory: String? = nil,
        input: Input = .null, stdout: Output = .captured, stderr: Output = .captured
    ) async throws -> Outcome {
        let child = try ChildProcess(
            executable, arguments, environment: environment, directory: directory, input: input, stdout: stdout, stderr: stderr)
        let status = await child.wait()
        return Outcome(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    /// `run`, blocking the calling thread: for synchronous code (a static initializer, work already on a thread of
    /// its own).
    public static func runBlocking(
        _ executable: String, _ arguments: [String] = [], environment: [String: String]? = nil, directory: String? = nil,
        input: Input = .null, stdout: Output = .captured, stderr: Output = .captured
    ) throws -> Outcome {
        let child = try ChildProcess(
            executable, arguments, environment: environment, directory: directory, input: input, stdout: stdout, stderr: stderr)
        let status = child.waitBlocking()
        return Outcome(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    /// False once the child has exited (and been reaped).
    public var isRunning: Bool { reaped.status.withLock { $0 == nil } }

    /// As Foundation's `terminationStatus`: the exit code, or the number of the signal that ended the child;
    /// nil while it runs.
    public var terminationStatus: Int32? { reaped.status.withLock { $0 }.map(Self.decoded) }

    /// What the child wrote to a captured standard output so far ("" when it was not captured).
    public var stdout: String { Self.text(at: stdoutPath) }
    /// What the child wrote to a captured standard error so far ("" when it was not captured).
    public var stderr: String { Self.text(at: stderrPath) }

    /// Waits for the child to exit; returns `terminationStatus`.
    public func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            exited.notify(queue: .global()) { [reaped] in
                continuation.resume(returning: Self.decoded(reaped.status.withLock { $0 } ?? 0))
            }
        }
    }

    /// `wait`, blocking the calling thread.
    public func waitBlocking() -> Int32 {
        exited.wait()
        return terminationStatus ?? 0
    }

    /// Sends `number` (SIGTERM, SIGKILL, SIGSTOP...) to the child unless it has exited.
    public func signal(_ number: Int32) {
        reaped.status.withLock { status in
            if status == nil { _ = kill(processIdentifier, number) }
        }
    }

    /// A child still running when its test lets go of it gets SIGTERM.
    deinit {
        signal(SIGTERM)
        outputCheck?(stdout + stderr)
        if let folder { try? FileManager.default.removeItem(at: folder) }
    }

    private static func text(at path: String?) -> String {
        guard let path, let data = FileManager.default.contents(atPath: path) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// The exit code of a normal exit, else the signal's number (the wait status's low 7 bits).
    private static func decoded(_ raw: Int32) -> Int32 {
        raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
    }

    // glibc declares these two (2.29 and 2.34; Debian 12 has 2.36) only for _GNU_SOURCE, which Swift's Glibc
    // module does not define, so they are looked up by name.
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias AddChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    private static func glibc<Function>(_ name: String, as type: Function.Type) -> Function {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), name) else { preconditionFailure("this C library has no \(name)") }
        return unsafeBitCast(symbol, to: type)
    }

    private static func closeFrom(_ actions: inout posix_spawn_file_actions_t, _ lowest: Int32) {
        _ = glibc("posix_spawn_file_actions_addclosefrom_np", as: AddCloseFrom.self)(&actions, lowest)
    }

    private static func changeDirectory(_ actions: inout posix_spawn_file_actions_t, _ directory: String) throws {
        let code = glibc("posix_spawn_file_actions_addchdir_np", as: AddChangeDirectory.self)(&actions, directory)
        guard code == 0 else { throw SpawnFailure(executable: directory, code: code) }
    }
}
