// Purges and prunes that touch many rows run as a series of bounded statements, so none holds locks or a
// snapshot for long: each affects at most `batch` rows, and the series stops at the first that affects fewer.

/// Runs bounded statements until one affects fewer rows than the batch.
enum BatchedStatements {
    /// Runs `statement` (which returns how many rows it affected, at most `batch`) up to `limit` times, until one
    /// affects fewer than `batch`; returns the rows affected in all.
    static func run(batch: Int, limit: Int, _ statement: () async throws -> Int) async throws -> Int {
        var total = 0
        for _ in 0..<limit {
            let affected = try await statement()
            total += affected
            if affected < batch { break }
        }
        return total
    }
}
