package position

import (
	"math"
	"strconv"
)

// isNumber reports whether v, a validated JSON value, is a number.
func isNumber(v []byte) bool {
	return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9')
}

// parseFinite parses v, a validated JSON value, as a float64 with
// strconv.ParseFloat semantics. ok is false when v is absent, not a number,
// or not finite (a literal beyond float64's range parses as ±Inf).
func parseFinite(v []byte) (f float64, ok bool) {
	if !isNumber(v) {
		return 0, false
	}
	if f, ok := exactFloat(v); ok {
		return f, true
	}
	// string(v) does not escape (ParseFloat copies the string into any
	// error it returns), so for literals up to 32 bytes the compiler
	// converts it on the stack; only longer, unusual literals allocate.
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// parseInt parses v, a validated JSON number, as an int64. ok is false when
// v has a fraction or an exponent, or is outside int64.
func parseInt(v []byte) (n int64, ok bool) {
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	// limit is the magnitude bound: 2^63-1, or 2^63 for a negative value.
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var u uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false // '.', 'e' or 'E': not an integer literal
		}
		d := uint64(c - '0')
		if u > (limit-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		return int64(-u), true // -u wraps correctly for u == 2^63
	}
	return int64(u), true
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// exactFloat is the fast path of parseFinite for the usual coordinates:
// when the literal v (a validated JSON number) has at most 15 significant
// digits and a decimal exponent within ±22, both the mantissa and the power
// of ten are exact float64s, so one correctly rounded multiply or divide
// gives exactly strconv.ParseFloat's result (it takes the same path,
// atof64exact, after parsing the string again). ok is false otherwise.
func exactFloat(v []byte) (f float64, ok bool) {
	i := 0
	neg := v[0] == '-'
	if neg {
		i++
	}
	var mant uint64
	nd, exp := 0, 0 // significant digits so far; decimal exponent of mant
	frac := false
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			if frac {
				exp--
			}
			if nd == 0 && c == '0' {
				continue // leading zeros are not significant
			}
			if nd++; nd > 15 {
				return 0, false
			}
			mant = mant*10 + uint64(c-'0')
		case c == '.':
			frac = true
		default: // 'e' or 'E', then an optional sign and at least one digit
			i++
			eneg := v[i] == '-'
			if v[i] == '+' || eneg {
				i++
			}
			if len(v)-i > 3 {
				return 0, false // leave huge exponents to ParseFloat
			}
			e := 0
			for ; i < len(v); i++ {
				e = e*10 + int(v[i]-'0')
			}
			if eneg {
				e = -e
			}
			exp += e
		}
	}
	switch {
	case mant == 0:
		f = 0
	case exp >= 0 && exp < len(pow10):
		f = float64(mant) * pow10[exp]
	case exp < 0 && -exp < len(pow10):
		f = float64(mant) / pow10[-exp]
	default:
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}
