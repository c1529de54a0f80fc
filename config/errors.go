package config

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors. Every problem Parse, Load or Validate reports is a
// *FieldError whose Err is exactly one of these, so callers can test with
// errors.Is and print the FieldError for the details.
var (
	// ErrSyntax: the file is not valid YAML, or holds more than one document.
	ErrSyntax = errors.New("invalid YAML")
	// ErrEmpty: the file holds no document, or a document that is only null.
	ErrEmpty = errors.New("file is empty: at least market is required")
	// ErrWrongType: a value has the wrong YAML type (a list or a mapping
	// where a scalar is expected, a string where a number is expected, a
	// scalar where a mapping is expected), or the top level is not a mapping.
	ErrWrongType = errors.New("wrong YAML type")
	// ErrUnknownKey: a key that is not part of the configuration, at any
	// level; Field is the full dotted key, e.g. "windows.sizee".
	ErrUnknownKey = errors.New("unknown key")
	// ErrDuplicateKey: the same key appears twice in one mapping.
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrRequired: a required value is missing or empty (market, URLs,
	// topic, client id, subject prefix, stream, state dir, listen address).
	ErrRequired = errors.New("is required")
	// ErrBadDuration: a duration is not in Go syntax ("45s", "5m", "1h30m";
	// a bare 0 is accepted).
	ErrBadDuration = errors.New("not a Go duration such as 45s or 5m")
	// ErrNotPositive: a value that must be > 0 is zero or negative.
	ErrNotPositive = errors.New("must be positive")
	// ErrNegative: a value that must be >= 0 is negative.
	ErrNegative = errors.New("must not be negative")
	// ErrOutOfRange: a value is outside its allowed range, or out of order
	// with another (geo.h3_resolution outside 0..15, windows.slide larger
	// than windows.size, too many windows per position, a number too large
	// for its type).
	ErrOutOfRange = errors.New("out of range")
	// ErrInvalid: a value has the right type but a bad form: a market name
	// or env var name not matching its pattern, a URL with the wrong scheme
	// or with credentials in it, an invalid MQTT topic filter or NATS
	// subject token, a non-finite number, a duration that is not a whole
	// number of milliseconds.
	ErrInvalid = errors.New("invalid value")
	// ErrEnvUnset: an environment variable named by password_env or
	// creds_env is not set, or empty (LoadLive only).
	ErrEnvUnset = errors.New("environment variable not set")
	// ErrBadSize: a size is neither an integer number of bytes nor a number
	// with one of the units B, kB, KiB, MB, MiB, GB, GiB.
	ErrBadSize = errors.New("not a size such as 1MiB or 65536")
)

// maxValueLen bounds how much of an offending value an error message quotes.
const maxValueLen = 80

// FieldError is one configuration problem: the file, the dotted key, the
// offending value and the reason. It unwraps to one of the package's
// sentinel errors.
type FieldError struct {
	File  string // file name as given to Parse or Load; empty from Validate
	Line  int    // 1-based line in File, 0 when unknown
	Field string // dotted key, e.g. "windows.gap"; empty for whole-file problems
	Value string // offending value as written (durations as time.Duration.String); may be empty
	// Reason is the human explanation; empty means Err's text says it all.
	Reason string
	Err    error // one of the sentinels
}

// Error formats the problem as
//
//	girona.yaml:12: windows.gap = "0s": must be positive
//
// leaving out the line, the field or the value when they are unknown.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		if e.Value != "" {
			b.WriteString(" = ")
			b.WriteString(strconv.Quote(truncate(e.Value, maxValueLen)))
		}
		b.WriteString(": ")
	}
	switch {
	case e.Reason != "":
		b.WriteString(e.Reason)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		b.WriteString("invalid configuration")
	}
	return b.String()
}

// Unwrap returns the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrors returns every *FieldError inside err (which may be a single
// *FieldError or an errors.Join of them), in order. It returns nil for nil
// or for an error holding no FieldError.
func FieldErrors(err error) []*FieldError {
	switch e := err.(type) {
	case nil:
		return nil
	case *FieldError:
		return []*FieldError{e}
	case interface{ Unwrap() []error }:
		var out []*FieldError
		for _, inner := range e.Unwrap() {
			out = append(out, FieldErrors(inner)...)
		}
		return out
	}
	return FieldErrors(errors.Unwrap(err))
}

// joinFieldErrors turns the list into the error Parse and Validate return:
// nil for none, else errors.Join of all of them (one per line when printed).
func joinFieldErrors(fes []*FieldError) error {
	if len(fes) == 0 {
		return nil
	}
	errs := make([]error, len(fes))
	for i, fe := range fes {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
