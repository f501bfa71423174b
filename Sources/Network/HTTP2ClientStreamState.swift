// The stream bookkeeping of one HTTP/2 client connection, as a value with no I/O: requests waiting for
// a stream slot (our own queue, so timeouts cover queue time and we know which never started), the
// streams in flight, the peer's SETTINGS_MAX_CONCURRENT_STREAMS as it changes, and GOAWAY. The session
// feeds it events and performs what the returned values say; tests drive it directly.

/// A request the state machine can expire: it only needs the deadline.
protocol HTTP2ClientDeadlined {
    var deadline: ContinuousClock.Instant { get }
}

/// Queue, in-flight streams, stream limit and GOAWAY of one HTTP/2 client connection.
struct HTTP2ClientStreamState<Request: HTTP2ClientDeadlined> {
    enum Phase: Equatable {
        /// TCP, TLS or the HTTP/2 preface are not done yet; requests queue.
        case connecting
        /// Streams may start, up to the limit.
        case ready
        /// GOAWAY received: streams at or below `lastStreamID` finish, nothing new starts.
        case goingAway(lastStreamID: Int32)
        /// The connection is gone; nothing is accepted.
        case closed
    }

    /// Requests that failed, all for the same reason.
    struct Failed {
        var requests: [Request] = []
        var error: NetworkError
    }

    /// What an expiry sweep found.
    struct Expired {
        /// Requests that timed out in the queue (never started).
        var queued: [Request] = []
        /// Streams in flight that timed out; reset them.
        var streams: [(id: Int32, request: Request)] = []
        /// The earliest deadline still pending, to arm the next sweep.
        var nextDeadline: ContinuousClock.Instant?
    }

    private(set) var phase: Phase = .connecting
    /// The peer's stream limit: 1 until its first SETTINGS says otherwise.
    private(set) var maxConcurrentStreams = 1
    private(set) var receivedSettings = false
    private(set) var active: [Int32: Request] = [:]
    private var queue: [Request] = []
    private var queueHead = 0

    var queuedCount: Int { queue.count - queueHead }
    var activeCount: Int { active.count }
    /// True when a GOAWAY'd or closed connection has nothing left to finish.
    var isDrained: Bool { active.isEmpty && queuedCount == 0 }

    // MARK: Events

    /// A caller asks to send. Returns the request back with an error if this connection cannot take it.
    mutating func enqueue(_ request: Request) -> Failed? {
        switch phase {
        case .connecting, .ready:
            queue.append(request)
            return nil
        case .goingAway:
            return Failed(requests: [request], error: .requestNotSent("the connection received GOAWAY"))
        case .closed:
            return Failed(requests: [request], error: .requestNotSent("the connection is closed"))
        }
    }

    /// TLS and the HTTP/2 preface are done.
    mutating func connected() {
        if phase == .connecting { phase = .ready }
    }

    /// The next queued request that may start now, if any; the caller submits it and then calls
    /// `started(_:id:)`, or `startFailed` when nghttp2 refuses it.
    mutating func nextToStart() -> Request? {
        guard phase == .ready, active.count < maxConcurrentStreams, queueHead < queue.count else { return nil }
        let request = queue[queueHead]
        queueHead += 1
        compactQueue()
        return request
    }

    mutating func started(_ request: Request, id: Int32) {
        active[id] = request
    }

    /// The peer's SETTINGS arrived. Returns true when the stream limit changed.
    mutating func settingsReceived(maxConcurrentStreams limit: Int) -> Bool {
        receivedSettings = true
        let changed = limit != maxConcurrentStreams
        maxConcurrentStreams = limit
        return changed
    }

    /// A stream closed (completed, reset or refused); returns its request unless already removed.
    mutating func streamClosed(id: Int32) -> Request? {
        active.removeValue(forKey: id)
    }

    /// GOAWAY: streams above `lastStreamID` were not processed and the queue never started; both may be
    /// retried elsewhere. Streams at or below it keep going.
    mutating func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: String) -> Failed {
        var failed = Failed(error: .goAway(errorCode: errorCode, debugData: debugData))
        if case .closed = phase { return failed }
        phase = .goingAway(lastStreamID: lastStreamID)
        for (id, request) in active where id > lastStreamID {
            active.removeValue(forKey: id)
            failed.requests.append(request)
        }
        failed.requests += drainQueue()
        return failed
    }

    /// The connection is gone: streams in flight fail with `error` (they may have been processed), queued
    /// requests fail with `queuedError` (they never started).
    mutating func closed(error: NetworkError, queuedError: NetworkError) -> [Failed] {
        phase = .closed
        let inFlight = Failed(requests: Array(active.values), error: error)
        active.removeAll()
        return [inFlight, Failed(requests: drainQueue(), error: queuedError)]
    }

    /// Removes every request whose deadline is at or before `now`.
    mutating func expire(now: ContinuousClock.Instant) -> Expired {
        var expired = Expired()
        var next: ContinuousClock.Instant?
        for (id, request) in active {
            if request.deadline <= now {
                expired.streams.append((id, request))
            } else if next.map({ request.deadline < $0 }) ?? true {
                next = request.deadline
            }
        }
        for (id, _) in expired.streams { active.removeValue(forKey: id) }
        if queuedCount > 0 {
            var kept: [Request] = []
            kept.reserveCapacity(queuedCount)
            for request in queue[queueHead...] {
                if request.deadline <= now {
                    expired.queued.append(request)
                } else {
                    if next.map({ request.deadline < $0 }) ?? true { next = request.deadline }
                    kept.append(request)
                }
            }
            queue = kept
            queueHead = 0
        }
        expired.nextDeadline = next
        return expired
    }

    // MARK: Queue storage

    private mutating func drainQueue() -> [Request] {
        let drained = Array(queue[queueHead...])
        queue.removeAll()
        queueHead = 0
        return drained
    }

    /// The queue is an array with a moving head; drop the consumed prefix once it dominates.
    private mutating func compactQueue() {
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        } else if queueHead >= 1024 && queueHead * 2 >= queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
    }
}
