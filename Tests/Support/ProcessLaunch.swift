// Child processes of the tests are launched one at a time, by every test target of the one test binary:
// concurrent `Process.run` calls of a parallel run crashed in Foundation (a bad read in its memcpy while spawning).
// One at a time is not the whole cure: the toolchain's Foundation (6.3.1) reads past a `readdir` record of
// /proc/self/fd while it spawns (swift-corelibs-foundation pull request 5472), which can still crash a launch now
// and then, more often with many descriptors open. Launching through posix_spawn directly would avoid it.
import Foundation
import Synchronization

/// Launches a test's child process while no other test launches one.
public enum ProcessLaunch {
    /// Held while a child process is launched (`ScratchCluster`'s posix_spawn takes it too).
    static let launches = Mutex(())

    /// `process.run()`, one launch at a time across the test binary.
    public static func run(_ process: Process) throws { try launches.withLock { _ in try process.run() } }
}
