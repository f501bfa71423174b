// A level-triggered wake-up for a polling loop: NOTIFY, a freed send slot or a shutdown request
// signal it; a waiter returns at the first signal or when its poll interval is over. Signals while no
// one waits are remembered (once), so a wake-up between two waits is never lost.
import Synchronization

/// Wakes one waiting loop early; otherwise it wakes on its own after the poll interval.
final class Wakeup: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns at the next signal (or at once if one is pending), or after `timeout`.
    func wait(upTo timeout: Duration) async {
        let timer = Task { [self] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            signal()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
        timer.cancel()
    }
}
