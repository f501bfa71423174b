// The simulator's allocation-free payload scanner against the parser it stands in for: whenever it decides, it
// gives the parser's answer (an object with an `aps` object, or not). It reads through unsafe pointers, so this
// harness is best run under AddressSanitizer too (Scripts/fuzz payload-scanner --address).
import APNsSimulator
import FuzzSupport
import MarqueeCore

fuzz { input in
    let bytes = input.bytes
    let parserAccepts = (try? JSONValue(parsing: bytes))?["aps"]?.objectValue != nil
    switch PayloadScanner.verdict(bytes) {
    case .apsObject: check(parserAccepts, "the scanner accepted a payload the parser refuses")
    case .rejected: check(!parserAccepts, "the scanner refused a payload the parser accepts")
    case .undecided: break
    }
}
