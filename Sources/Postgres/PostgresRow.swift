// Rows read straight from the PGresult they belong to (shared, freed when the last row goes), so a
// large result is not copied into Swift values until a column is decoded.

/// The rows a statement returned, plus the number of rows it affected.
public struct PostgresRows: RandomAccessCollection, Sendable {
    let storage: PostgresResultStorage

    public var startIndex: Int { 0 }
    public var endIndex: Int { storage.rowCount }
    public subscript(position: Int) -> PostgresRow { PostgresRow(storage: storage, index: position) }

    /// Column names, in order.
    public var columns: [String] { storage.columnNames }
    /// Rows inserted, updated, deleted, copied or selected, when the command reports a count.
    public var affectedRows: Int? { storage.affectedRows }
}

/// One row of a result; decode its columns by name or position.
public struct PostgresRow: Sendable {
    let storage: PostgresResultStorage
    let index: Int

    /// Column names, in order.
    public var columns: [String] { storage.columnNames }

    /// Decodes the column named `column`. NULL decodes only into an Optional; errors name the column.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, column: String) throws -> T {
        guard let position = storage.columnIndex[column] else {
            var error = PostgresError.misuse("no column \"\(column)\" in the result (columns: \(storage.columnNames.joined(separator: ", ")))")
            error.column = column
            throw error
        }
        return try decode(type, at: position)
    }

    /// Decodes the column at `position` (0-based).
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at position: Int) throws -> T {
        guard storage.columnNames.indices.contains(position) else {
            throw PostgresError.misuse("no column at position \(position); the result has \(storage.columnNames.count)")
        }
        let name = storage.columnNames[position]
        let columnType = PostgresOID.name(storage.columnTypes[position])
        if storage.isNull(row: index, column: position) {
            guard let null = T.postgresNull else {
                var error = PostgresError.decoding(column: name, type: T.self, columnType: columnType)
                error.detail = "the value is NULL; decode an Optional"
                throw error
            }
            return null
        }
        guard let value = T(postgresText: storage.text(row: index, column: position)) else {
            throw PostgresError.decoding(column: name, type: T.self, columnType: columnType)
        }
        return value
    }

    /// True when the column named `column` is NULL (false when there is no such column).
    public func isNull(column: String) -> Bool {
        guard let position = storage.columnIndex[column] else { return false }
        return storage.isNull(row: index, column: position)
    }
}
