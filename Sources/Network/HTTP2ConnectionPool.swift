// A pool of HTTP/2 client connections keyed by origin and a caller-given key (connections for different
// keys are never shared: APNs binds a signing key's team to a connection). Each key gets up to N
// connections spread over the event loops. A request goes to the connection with the most free stream
// slots, opening another connection before queueing; each connection holds at most its stream limit plus a
// bounded queue, and beyond that callers wait here, subject to their deadline (back-pressure). Dead or
// GOAWAY'd connections are replaced, after a failed connect only after an exponential backoff with jitter.
// Requests that provably never reached the peer (`.goAway`, `.requestNotSent`) are retried here within
// their deadline. All state sits in one Mutex; the per-request cost is two short locks.
import Foundation
import Synchronization

/// HTTP/2 connections per (origin, key), with stream-limit-aware load spreading, back-pressure and reconnects.
public final class HTTP2ConnectionPool: Sendable {
    /// Sizes and policies of a pool.
    public struct Configuration: Sendable {
        /// Connections per (origin, key).
        public var connectionsPerKey: Int
        /// Requests a connection may hold beyond its stream limit, waiting for a slot.
        public var maxQueuedPerConnection: Int
        public var connection: HTTP2ClientConnection.Configuration
        public var backoff: Backoff

        public init(
            connectionsPerKey: Int = 2, maxQueuedPerConnection: Int = 256,
            connection: HTTP2ClientConnection.Configuration = .init(), backoff: Backoff = .init()
        ) {
            self.connectionsPerKey = max(1, connectionsPerKey)
            self.maxQueuedPerConnection = max(0, maxQueuedPerConnection)
            self.connection = connection
            self.backoff = backoff
        }
    }

    /// Exponential backoff with jitter between failed connection attempts, bounded by `maximum`.
    public struct Backoff: Sendable {
        public var initial: Duration
        public var maximum: Duration

        public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(30)) {
            self.initial = initial
            self.maximum = maximum
        }

        /// The wait after `failures` consecutive failures: initial * 2^(failures-1), capped at `maximum`, half
        /// fixed, half random ("equal jitter"), the rule of MarqueeCore's `RetryBackoff` (Network uses no Marquee module).
        public func delay(afterFailures failures: Int) -> Duration {
            guard failures > 0 else { return .zero }
            let full = min(Self.seconds(maximum), Self.seconds(initial) * pow(2, Double(min(failures - 1, 62))))
            let seconds = full / 2 + Double.random(in: 0...(full / 2))
            return .nanoseconds(Int64((seconds * 1e9).rounded()))
        }

        private static func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
    }

    /// A connection event, with the (origin, key) and the pool's id of the connection.
    public struct Event: Sendable {
        public var origin: HTTP2Origin
        public var key: String
        public var connectionID: Int
        public var event: HTTP2ClientConnection.Event
    }

    private let group: EventLoopGroup
    private let tls: TLSClientContext
    public let configuration: Configuration
    private let state = Mutex(State())
    /// Every connection event of the pool, newest kept if nobody reads them.
    public let events: AsyncStream<Event>
    private let eventSink: AsyncStream<Event>.Continuation

    public init(group: EventLoopGroup, tls: TLSClientContext, configuration: Configuration = Configuration()) {
        self.group = group
        self.tls = tls
        self.configuration = configuration
        (events, eventSink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(256))
    }

    /// Sends `request` on a connection for (origin, key) and returns the response. `timeout` covers
    /// waiting here, in the connection's queue and on the wire. A request that provably never reached the
    /// peer is retried within the timeout; if time runs out first the error is `.requestNotSent` (or
    /// `.goAway`), while `.timedOut` means the request was sent and may have been processed.
    public func send(_ request: HTTPRequest, to origin: HTTP2Origin, key: String, timeout: Duration) async throws(NetworkError) -> HTTPResponse {
        let deadline = ContinuousClock.now + timeout
        let key = BucketKey(origin: origin, key: key)
        while true {
            let lease = try await acquire(key, deadline: deadline)
            let result = await lease.connection.send(request, deadline: deadline)
            release(lease)
            switch result {
            case .success(let response):
                return response
            case .failure(let error) where error.wasNotSent:
                // It never reached the peer's application: try again while time remains.
                if ContinuousClock.now >= deadline { throw error }
            case .failure(let error):
                throw error
            }
        }
    }

    /// Closes every connection; waiting callers and requests in flight fail with `.shutdown`.
    public func shutdown() async {
        let (connections, waiters) = state.withLock { state -> ([HTTP2ClientConnection], [Waiter]) in
            state.isShutDown = true
            var connections: [HTTP2ClientConnection] = []
            var waiters: [Waiter] = []
            for bucket in state.buckets.values {
                connections += bucket.slots.compactMap(\.connection)
                waiters += bucket.waiters
                bucket.waiters.removeAll()
            }
            state.buckets.removeAll()
            state.lastBucket = nil
            return (connections, waiters)
        }
        for waiter in waiters { waiter.continuation.resume(returning: .failure(.shutdown)) }
        for connection in connections { await connection.close() }
        eventSink.finish()
    }

    // MARK: State

    private struct BucketKey: Hashable, Sendable {
        var origin: HTTP2Origin
        var key: String
    }

    private struct Slot {
        var connection: HTTP2ClientConnection?
        var connectionID = 0
        var streamLimit = 1
        /// Requests handed to this connection and not yet returned.
        var outstanding = 0
        var consecutiveFailures = 0
        var connected = false
        /// After a failed connect, no new connection in this slot before this instant.
        var retryAt: ContinuousClock.Instant?
    }

    private struct Waiter {
        var deadline: ContinuousClock.Instant
        var continuation: UnsafeContinuation<Result<Lease, NetworkError>, Never>
    }

    /// The connections and waiting callers of one (origin, key). A class so a lease can point at it and
    /// the hot path hashes the key once; only touched with the pool's mutex held.
    private final class Bucket: @unchecked Sendable {
        let key: BucketKey
        var slots: [Slot]
        var waiters: [Waiter] = []

        init(key: BucketKey, connections: Int) {
            self.key = key
            slots = Array(repeating: Slot(), count: connections)
        }
    }

    private struct Lease: Sendable {
        var connection: HTTP2ClientConnection
        var bucket: Bucket
        var slot: Int
        var connectionID: Int
    }

    private struct State {
        var buckets: [BucketKey: Bucket] = [:]
        var lastBucket: Bucket?
        var nextConnectionID = 1
        var isShutDown = false
        /// When the wake-up timer (waiter deadlines, backoff ends) is armed for.
        var wakeAt: ContinuousClock.Instant?
    }

    private typealias Wakeups = [(UnsafeContinuation<Result<Lease, NetworkError>, Never>, Result<Lease, NetworkError>)]

    // MARK: Leasing

    private func acquire(_ key: BucketKey, deadline: ContinuousClock.Instant) async throws(NetworkError) -> Lease {
        enum Outcome {
            case leased(Lease)
            case failed(NetworkError)
            case wait(Bucket)
        }
        let immediate = state.withLock { state -> Outcome in
            if state.isShutDown { return .failed(.shutdown) }
            let bucket = findBucket(key, in: &state)
            if let lease = lease(in: bucket, state: &state) { return .leased(lease) }
            return .wait(bucket)
        }
        let bucket: Bucket
        switch immediate {
        case .leased(let lease): return lease
        case .failed(let error): throw error
        case .wait(let waitIn): bucket = waitIn
        }
        let result = await withUnsafeContinuation { continuation in
            let outcome = state.withLock { state -> Result<Lease, NetworkError>? in
                // Checked again under the lock: a slot may have freed since.
                if state.isShutDown { return .failure(.shutdown) }
                if let lease = lease(in: bucket, state: &state) { return .success(lease) }
                bucket.waiters.append(Waiter(deadline: deadline, continuation: continuation))
                armWake(at: deadline, in: &state)
                for slot in bucket.slots { if let retryAt = slot.retryAt { armWake(at: retryAt, in: &state) } }
                return nil
            }
            if let outcome { continuation.resume(returning: outcome) }
        }
        return try result.get()
    }

    private func findBucket(_ key: BucketKey, in state: inout State) -> Bucket {
        // Most traffic goes to one (origin, key) at a time: comparing beats hashing two strings.
        if let last = state.lastBucket, last.key == key { return last }
        let bucket = state.buckets[key] ?? Bucket(key: key, connections: configuration.connectionsPerKey)
        state.buckets[key] = bucket
        state.lastBucket = bucket
        return bucket
    }

    /// Picks a connection for one request, opening one if that is the best choice; nil when all are full.
    private func lease(in bucket: Bucket, state: inout State) -> Lease? {
        let queueRoom = configuration.maxQueuedPerConnection
        // A free stream slot first, then a new connection, then a place in a connection's queue.
        var index = Self.best(bucket.slots) { $0.streamLimit - $0.outstanding }
        if index == nil {
            let now = ContinuousClock.now
            if let empty = bucket.slots.firstIndex(where: { $0.connection == nil && ($0.retryAt ?? now) <= now }) {
                openConnection(in: bucket, slot: empty, state: &state)
                index = empty
            }
        }
        if index == nil { index = Self.best(bucket.slots) { $0.streamLimit + queueRoom - $0.outstanding } }
        guard let index, let connection = bucket.slots[index].connection else { return nil }
        bucket.slots[index].outstanding += 1
        return Lease(connection: connection, bucket: bucket, slot: index, connectionID: bucket.slots[index].connectionID)
    }

    /// The live slot with the most room, if any has room.
    private static func best(_ slots: [Slot], room: (Slot) -> Int) -> Int? {
        var chosen: Int?
        var chosenRoom = 0
        for index in slots.indices where slots[index].connection != nil {
            let free = room(slots[index])
            if free > chosenRoom {
                chosen = index
                chosenRoom = free
            }
        }
        return chosen
    }

    private func openConnection(in bucket: Bucket, slot index: Int, state: inout State) {
        let id = state.nextConnectionID
        state.nextConnectionID += 1
        let key = bucket.key
        let connection = HTTP2ClientConnection(
            origin: key.origin, tls: tls, loop: group.next(),
            configuration: configuration.connection
        ) { [weak self] event in
            self?.connectionEvent(event, key: key, connectionID: id)
        }
        bucket.slots[index] = Slot(
            connection: connection, connectionID: id,
            consecutiveFailures: bucket.slots[index].consecutiveFailures)
    }

    private func release(_ lease: Lease) {
        let wakeups = state.withLock { state -> Wakeups in
            let bucket = lease.bucket
            if bucket.slots[lease.slot].connectionID == lease.connectionID {
                bucket.slots[lease.slot].outstanding -= 1
            }
            return bucket.waiters.isEmpty ? [] : serveWaiters(bucket, in: &state)
        }
        if !wakeups.isEmpty { resume(wakeups) }
    }

    /// Hands free places to waiters in arrival order; expired waiters time out.
    private func serveWaiters(_ bucket: Bucket, in state: inout State) -> Wakeups {
        var wakeups: Wakeups = []
        let now = ContinuousClock.now
        var served = 0
        for waiter in bucket.waiters {
            if waiter.deadline <= now {
                wakeups.append((waiter.continuation, .failure(.requestNotSent("timed out waiting for a connection"))))
            } else if let lease = lease(in: bucket, state: &state) {
                wakeups.append((waiter.continuation, .success(lease)))
            } else {
                break
            }
            served += 1
        }
        bucket.waiters.removeFirst(served)
        // Waiters left need a wake-up at their deadline or when a backoff ends. A waiter arms the timer
        // when it arrives, so only after the timer has fired (none armed) is a full scan needed.
        if state.wakeAt == nil, var earliest = bucket.waiters.lazy.map(\.deadline).min() {
            for slot in bucket.slots { if let retryAt = slot.retryAt, retryAt < earliest { earliest = retryAt } }
            armWake(at: earliest, in: &state)
        }
        return wakeups
    }

    private func resume(_ wakeups: Wakeups) {
        for (continuation, result) in wakeups { continuation.resume(returning: result) }
    }

    // MARK: Connection events and timers

    private func connectionEvent(_ event: HTTP2ClientConnection.Event, key: BucketKey, connectionID: Int) {
        eventSink.yield(Event(origin: key.origin, key: key.key, connectionID: connectionID, event: event))
        let wakeups = state.withLock { state -> Wakeups in
            guard let bucket = state.buckets[key],
                let index = bucket.slots.firstIndex(where: { $0.connectionID == connectionID })
            else { return [] }
            var slot = bucket.slots[index]
            switch event {
            case .connected:
                slot.connected = true
                slot.consecutiveFailures = 0
            case .maxConcurrentStreamsChanged(let limit):
                slot.streamLimit = limit
            case .goAway, .closed:
                // Replaced on demand; a connection that never came up makes the next attempt wait.
                // Streams still running on a GOAWAY'd connection finish there, and it then closes itself.
                if slot.connected {
                    slot = Slot()
                } else {
                    let failures = slot.consecutiveFailures + 1
                    slot = Slot(
                        consecutiveFailures: failures,
                        retryAt: .now + configuration.backoff.delay(afterFailures: failures))
                }
            }
            bucket.slots[index] = slot
            if let retryAt = slot.retryAt, !bucket.waiters.isEmpty { armWake(at: retryAt, in: &state) }
            return serveWaiters(bucket, in: &state)
        }
        resume(wakeups)
    }

    /// Arms the pool's one wake-up timer for `instant` unless it is armed for earlier already.
    private func armWake(at instant: ContinuousClock.Instant, in state: inout State) {
        if let armed = state.wakeAt, armed <= instant { return }
        state.wakeAt = instant
        let loop = group.loops[0]
        loop.execute { [weak self] in
            guard let self else { return }
            loop.schedule(after: max(instant - .now, .zero) + .milliseconds(1)) { [weak self] in self?.wake(armedFor: instant) }
        }
    }

    private func wake(armedFor instant: ContinuousClock.Instant) {
        let wakeups = state.withLock { state -> Wakeups in
            if state.wakeAt == instant { state.wakeAt = nil }
            var wakeups: Wakeups = []
            for bucket in state.buckets.values where !bucket.waiters.isEmpty {
                wakeups += serveWaiters(bucket, in: &state)
            }
            return wakeups
        }
        resume(wakeups)
    }

    // MARK: Inspection (tests and diagnostics)

    /// Requests handed to each live connection for (origin, key) and not yet returned.
    func outstandingRequests(to origin: HTTP2Origin, key: String) -> [Int] {
        state.withLock { state in
            state.buckets[BucketKey(origin: origin, key: key)]?.slots.compactMap { $0.connection == nil ? nil : $0.outstanding } ?? []
        }
    }

    /// The pool ids of the live connections for (origin, key).
    public func connectionIDs(to origin: HTTP2Origin, key: String) -> [Int] {
        state.withLock { state in
            state.buckets[BucketKey(origin: origin, key: key)]?.slots.compactMap { $0.connection == nil ? nil : $0.connectionID } ?? []
        }
    }
}
