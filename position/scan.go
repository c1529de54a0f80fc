package position

// This file is the strict JSON scanner. It validates the whole payload with
// the grammar of RFC 8259 as encoding/json implements it (json.Valid), and
// records where the values of the known top-level keys are.

// field indexes the top-level keys Decode and DecodeOwnTracks look at.
type field uint8

const (
	fieldCourier field = iota
	fieldLat
	fieldLon
	fieldTS
	fieldAccuracy
	fieldArrival
	// OwnTracks (DecodeOwnTracks): fieldLat and fieldLon are shared.
	fieldType
	fieldTst
	fieldAcc
	fieldTopic
	numFields
	fieldUnknown = numFields
)

// span is the byte range [start, end) of a value in the payload. A zero
// span means the key was absent: no value can end at offset 0.
type span struct{ start, end int32 }

// of returns the value's bytes in b, or nil when the key was absent.
func (s span) of(b []byte) []byte {
	if s.end == 0 {
		return nil
	}
	return b[s.start:s.end]
}

type fieldSpans [numFields]span

// maxDepth bounds the nesting of skipped values. A payload of MaxPayload
// bytes cannot nest deeper than MaxPayload/2 (every level needs an opening
// and a closing byte), so the bound never rejects a payload json.Valid
// accepts; it only keeps the scanner safe if called on something larger.
const maxDepth = MaxPayload / 2

// isSpace reports JSON whitespace; nothing else (no BOM, no \v, no \f).
func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t'
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanTop validates b as one JSON object surrounded by optional whitespace
// and records the spans of the known keys' values (the last occurrence of a
// duplicate key wins). It reports false when b is not valid JSON or not an
// object.
func (d *Decoder) scanTop(b []byte, f *fieldSpans) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, esc, ok := scanString(b, i)
		if !ok {
			return false
		}
		k := keyField(b[i+1:end-1], esc)
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		start := i
		if i, ok = d.scanValue(b, i); !ok {
			return false
		}
		if k != fieldUnknown {
			f[k] = span{int32(start), int32(i)}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// keyField maps a raw key (the bytes between the quotes) to the field it
// names. esc reports whether the key contains escapes.
func keyField(k []byte, esc bool) field {
	if esc {
		var buf [len("timestamp_ms")]byte
		n, ok := unescapeASCII(buf[:], k)
		if !ok {
			return fieldUnknown
		}
		k = buf[:n]
	}
	switch len(k) {
	case 3:
		switch string(k) {
		case "lat":
			return fieldLat
		case "lon":
			return fieldLon
		case "tst":
			return fieldTst
		case "acc":
			return fieldAcc
		}
	case 5:
		switch string(k) {
		case "_type":
			return fieldType
		case "topic":
			return fieldTopic
		}
	case 7:
		if string(k) == "courier" {
			return fieldCourier
		}
	case 10:
		switch string(k) {
		case "accuracy_m":
			return fieldAccuracy
		case "arrival_ms":
			return fieldArrival
		}
	case 12:
		if string(k) == "timestamp_ms" {
			return fieldTS
		}
	}
	return fieldUnknown
}

// scanValue validates the JSON value starting at b[i] and returns the index
// just after it.
func (d *Decoder) scanValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '{', '[':
		return d.scanNested(b, i)
	default:
		return scanScalar(b, i)
	}
}

// scanScalar validates the string, number or literal starting at b[i] and
// returns the index just after it. What follows is the caller's to check
// (so "01" fails there, at the unexpected '1').
func scanScalar(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := scanString(b, i)
		return end, ok
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return i, false
}

func scanLiteral(b []byte, i int, lit string) (int, bool) {
	end := i + len(lit)
	if end > len(b) || string(b[i:end]) != lit {
		return i, false
	}
	return end, true
}

// scanNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// starting at b[i] and returns the index just after it.
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// plainString marks the bytes that stand for themselves inside a JSON
// string: everything but '"', '\\' and control characters. Bytes >= 0x80
// are plain whatever UTF-8 they form, as in json.Valid.
var plainString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hexVal maps a hex digit to its value and any other byte to 0xff.
var hexVal = func() (t [256]byte) {
	for c := range t {
		t[c] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
		t[c-'a'+'A'] = byte(c-'a') + 10
	}
	return t
}()

// scanString validates the string whose opening quote is b[i] and returns
// the index just after its closing quote, and whether it has escapes.
func scanString(b []byte, i int) (end int, esc, ok bool) {
	for i++; i < len(b); i++ {
		c := b[i]
		if plainString[c] {
			continue
		}
		switch c {
		case '"':
			return i + 1, esc, true
		case '\\':
			esc = true
			i++
			if i >= len(b) {
				return i, esc, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) ||
					hexVal[b[i+1]]|hexVal[b[i+2]]|hexVal[b[i+3]]|hexVal[b[i+4]] == 0xff {
					return i, esc, false
				}
				i += 4
			default:
				return i, esc, false
			}
		default: // control character
			return i, esc, false
		}
	}
	return i, esc, false
}

// scanNested validates the object or array opening at b[i] and returns the
// index just after it. It is iterative, with the kind of each open level
// in d.nest, so hostile nesting cannot grow the goroutine stack.
func (d *Decoder) scanNested(b []byte, i int) (int, bool) {
	depth := 0
	for {
		// i is at the start of a value.
		if i >= len(b) {
			return i, false
		}
		if c := b[i]; c == '{' || c == '[' {
			if depth == maxDepth {
				return i, false
			}
			obj := c == '{'
			d.setNest(depth, obj)
			depth++
			i = skipSpace(b, i+1)
			if i < len(b) && (obj && b[i] == '}' || !obj && b[i] == ']') {
				i++
				depth--
			} else {
				if obj {
					var ok bool
					if i, ok = scanKeyColon(b, i); !ok {
						return i, false
					}
				}
				continue
			}
		} else {
			var ok bool
			if i, ok = scanScalar(b, i); !ok {
				return i, false
			}
		}
		// A value just ended: close every level that ends here, then
		// move on to the next element of the innermost open one.
		for {
			if depth == 0 {
				return i, true
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			obj := d.isObj(depth - 1)
			if c := b[i]; obj && c == '}' || !obj && c == ']' {
				i++
				depth--
				continue
			} else if c != ',' {
				return i, false
			}
			i = skipSpace(b, i+1)
			if obj {
				var ok bool
				if i, ok = scanKeyColon(b, i); !ok {
					return i, false
				}
			}
			break
		}
	}
}

// scanKeyColon validates `"key" :` plus the whitespace after it, starting
// at b[i], and returns the index of the value that follows.
func scanKeyColon(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, _, ok := scanString(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

func (d *Decoder) setNest(depth int, obj bool) {
	w, bit := depth/64, uint64(1)<<(depth%64)
	if obj {
		d.nest[w] |= bit
	} else {
		d.nest[w] &^= bit
	}
}

func (d *Decoder) isObj(depth int) bool {
	return d.nest[depth/64]&(uint64(1)<<(depth%64)) != 0
}

func hasBackslash(s []byte) bool {
	for _, c := range s {
		if c == '\\' {
			return true
		}
	}
	return false
}

// unescapeASCII decodes s, the contents of a validated JSON string, into
// dst and returns its length. ok is false when the result does not fit in
// dst or has a byte outside ASCII: every key Decode looks for and every
// valid courier id is ASCII, so such a string can match none of them (and
// encoding/json would turn invalid UTF-8 or lone surrogates into U+FFFD,
// which is not ASCII either).
func unescapeASCII(dst, s []byte) (n int, ok bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			// s is validated: an escape is complete.
			i++
			switch s[i] {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				if s[i+1] != '0' || s[i+2] != '0' || hexVal[s[i+3]] > 7 {
					return n, false // U+0080 or above
				}
				c = hexVal[s[i+3]]<<4 | hexVal[s[i+4]]
				i += 4
			default: // '"', '\\', '/'
				c = s[i]
			}
		} else if c >= 0x80 {
			return n, false
		}
		if n == len(dst) {
			return n, false
		}
		dst[n] = c
		n++
	}
	return n, true
}
