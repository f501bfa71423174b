// Why outbox wake-ups are sent after the commit rather than inside the ingest transaction: a NOTIFY in a
// transaction takes PostgreSQL's cluster-wide notify lock at commit and holds it through the WAL flush,
// so with durable settings no two ingest commits could share a flush (Scripts/bench service measured
// 847 updates/s with it against 996 without). Here wake-ups are batched: at most one per `interval`
// wakes this process's dispatcher and sends one NOTIFY to the others (a statement of its own, which
// writes no WAL), so a claim gathers the commits of the interval instead of one claim per commit. An
// urgent update (an alert or `high`) wakes this process's dispatcher at once. Work due later (an update
// the pacing holds back: `IngestRepository`'s `pacing`) is handed to this process's dispatcher with its
// due time and sends no NOTIFY: a claim now would find nothing due. The NOTIFY carries the sender's
// instance name, so this process's dispatcher, already woken, skips its echo (it would claim twice per
// interval). Lost or late notifications cost nothing but latency: every dispatcher also polls.
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Synchronization

/// Tells dispatchers that outbox work was committed: this process's at once, other instances by NOTIFY.
public final class OutboxNotifier: Sendable {
    private let pool: PostgresPool
    /// The NOTIFY payload: the instance whose dispatcher this notifier wakes directly.
    private let sender: String
    private let interval: Duration
    private let logger: Logger
    private let localWakeups = Mutex<[@Sendable (_ dueIn: TimeInterval?) -> Void]>([])
    /// A NOTIFY is being sent (or waits for its interval); `again` asks for one more after it.
    private let sending = Mutex<(active: Bool, again: Bool)>((false, false))

    /// `sender`: this process's dispatcher instance (`BroadcastDispatcherConfiguration.instance`).
    public init(pool: PostgresPool, sender: String, interval: Duration = .milliseconds(20), logger: Logger) {
        self.pool = pool
        self.sender = sender
        self.interval = interval
        self.logger = logger
    }

    /// Calls `wake` for committed work (this process's dispatcher): with nil to claim now (at once for urgent
    /// work, else once per interval), or with the seconds until work due later is due.
    public func onCommitted(_ wake: @escaping @Sendable (_ dueIn: TimeInterval?) -> Void) {
        localWakeups.withLock { $0.append(wake) }
    }

    /// Outbox work was committed, due in `dueIn` seconds (nil or 0 and less: now): wake dispatchers within the
    /// interval, this process's at once when `urgent`; work due later than the interval only goes to this
    /// process's dispatcher, with its due time. Never blocks.
    public func committed(urgent: Bool = false, dueIn: TimeInterval? = nil) {
        if !urgent, let dueIn, dueIn > interval / .seconds(1) {
            wakeLocal(dueIn: dueIn)
            return
        }
        if urgent { wakeLocal() }
        let start = sending.withLock { state -> Bool in
            if state.active {
                state.again = true
                return false
            }
            state.active = true
            return true
        }
        guard start else { return }
        Task { await notifyUntilQuiet() }
    }

    private func wakeLocal(dueIn: TimeInterval? = nil) {
        for wake in localWakeups.withLock({ $0 }) { wake(dueIn) }
    }

    /// Wakes and sends one NOTIFY, then again while commits kept arriving, at most once per interval.
    private func notifyUntilQuiet() async {
        while true {
            wakeLocal()
            do {
                try await pool.execute("SELECT pg_notify(\(IngestRepository.notifyChannel), \(sender))")
            } catch {
                logger.debug("outbox NOTIFY failed; other instances poll", ["error": .string("\(error)")])
            }
            try? await Task.sleep(for: interval)
            let more = sending.withLock { state -> Bool in
                if state.again {
                    state.again = false
                    return true
                }
                state.active = false
                return false
            }
            if !more { return }
        }
    }
}
