// Splits a SQL script into statements at top-level semicolons, for migrations that must run outside
// a transaction. It knows what can hide a semicolon: '...' and E'...' strings, "..." identifiers,
// $tag$...$tag$ bodies, -- line comments and nested /* */ comments.

/// Splits SQL text into statements.
enum SQLStatementSplitter {
    /// The statements of `sql`, trimmed, without empty or comment-only ones.
    static func split(_ sql: String) -> [String] {
        let chars = Array(sql.unicodeScalars)
        var statements: [String] = []
        var start = 0
        var index = 0
        var hasCode = false
        func flush(upTo end: Int) {
            if hasCode {
                var text = String.UnicodeScalarView()
                text.append(contentsOf: chars[start..<end])
                statements.append(String(text).trimmingCharacters(in: .whitespacesAndNewlines))
            }
            hasCode = false
        }
        while index < chars.count {
            let char = chars[index]
            let next: Unicode.Scalar? = index + 1 < chars.count ? chars[index + 1] : nil
            switch char {
            case "-" where next == "-":
                while index < chars.count, chars[index] != "\n" { index += 1 }
                continue
            case "/" where next == "*":
                var depth = 0
                repeat {
                    if chars[index] == "/", index + 1 < chars.count, chars[index + 1] == "*" {
                        depth += 1
                        index += 2
                    } else if chars[index] == "*", index + 1 < chars.count, chars[index + 1] == "/" {
                        depth -= 1
                        index += 2
                    } else {
                        index += 1
                    }
                } while depth > 0 && index < chars.count
                continue
            case "'":
                let escapes =
                    index > 0 && (chars[index - 1] == "E" || chars[index - 1] == "e")
                    && (index < 2 || !isIdentifierChar(chars[index - 2]))
                index += 1
                while index < chars.count {
                    if escapes, chars[index] == "\\" {
                        index += 2
                        continue
                    }
                    if chars[index] == "'" {
                        if index + 1 < chars.count, chars[index + 1] == "'" {
                            index += 2
                            continue
                        }
                        break
                    }
                    index += 1
                }
                hasCode = true
            case "\"":
                index += 1
                while index < chars.count, chars[index] != "\"" { index += 1 }
                hasCode = true
            case "$" where index == 0 || !isIdentifierChar(chars[index - 1]):
                if let tagEnd = dollarTagEnd(chars, from: index) {
                    let tag = Array(chars[index...tagEnd])
                    var search = tagEnd + 1
                    while search + tag.count <= chars.count, Array(chars[search..<(search + tag.count)]) != tag { search += 1 }
                    index = min(search + tag.count, chars.count)
                    hasCode = true
                    continue
                }
                hasCode = true
            case ";":
                flush(upTo: index)
                start = index + 1
            default:
                if !char.properties.isWhitespace { hasCode = true }
            }
            index += 1
        }
        flush(upTo: chars.count)
        return statements
    }

    private static func isIdentifierChar(_ char: Unicode.Scalar) -> Bool {
        char.properties.isAlphabetic || ("0"..."9").contains(char) || char == "_"
    }

    /// The index of the closing `$` of a dollar-quote tag starting at `start` (`$$` or `$tag$`).
    private static func dollarTagEnd(_ chars: [Unicode.Scalar], from start: Int) -> Int? {
        var index = start + 1
        while index < chars.count {
            let char = chars[index]
            if char == "$" { return index }
            guard isIdentifierChar(char), !(index == start + 1 && ("0"..."9").contains(char)) else { return nil }
            index += 1
        }
        return nil
    }
}
