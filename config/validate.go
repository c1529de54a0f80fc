package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	// The zone database in the binary: timezone must load in a container
	// without /usr/share/zoneinfo too.
	_ "time/tzdata"
)

// MaxWindowsPerPosition bounds windows.size / windows.slide (rounded up):
// the number of distance windows one position joins, hence per-courier
// state. A larger ratio is almost certainly a typo (slide 1ms).
const MaxWindowsPerPosition = 10000

var (
	marketRe = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	envRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks every rule of the configuration and returns nil, or an
// errors.Join of one *FieldError per problem, in key order (see
// FieldErrors). The errors from Validate carry no File or Line; Parse adds
// them.
func (c Config) Validate() error {
	return joinFieldErrors(c.validate())
}

// validator collects problems; each check reports at most one per field.
type validator struct{ errs []*FieldError }

func (v *validator) add(field, value string, err error, reason string) {
	v.errs = append(v.errs, &FieldError{Field: field, Value: value, Err: err, Reason: reason})
}

func (c Config) validate() []*FieldError {
	var v validator
	switch {
	case c.Market == "":
		v.add("market", "", ErrRequired, "")
	case !marketRe.MatchString(c.Market):
		v.add("market", c.Market, ErrInvalid, "must be 1 to 32 of [a-z0-9_-]")
	}
	if _, err := time.LoadLocation(c.Timezone); err != nil || c.Timezone == "" {
		v.add("timezone", c.Timezone, ErrInvalid, "must be an IANA time zone name such as UTC or Europe/Madrid")
	}
	if !slices.Contains(Sources, c.Source) {
		v.add("source", c.Source, ErrInvalid, "must be one of "+strings.Join(Sources, ", "))
	}
	if c.Source == "jetstream" { // an unused section need not be complete
		c.JetStream.validate(&v)
		if j := c.JetStream; j.MaxAge > 0 && j.MaxAge%time.Second == 0 {
			if need := max(MinPositionsMaxAge, 10*c.State.CheckpointInterval); j.MaxAge < need {
				v.add("jetstream.max_age", j.MaxAge.String(), ErrOutOfRange,
					fmt.Sprintf("must be 0 (no age bound) or at least %s (1h and 10 × state.checkpoint_interval): a new owner replays the positions stream from the last recorded checkpoint", need))
			}
		}
	}
	c.MQTT.validate(&v)
	c.NATS.validate(&v)
	c.Windows.validate(&v)
	c.Distance.validate(&v)
	if r := c.Geo.H3Resolution; r < 0 || r > 15 {
		v.add("geo.h3_resolution", strconv.Itoa(r), ErrOutOfRange, "must be between 0 and 15")
	}
	if z := c.DeadZones; z.Window != 0 {
		if z.Window < 0 || z.Window%time.Millisecond != 0 {
			v.add("dead_zones.window", z.Window.String(), ErrOutOfRange, "must be 0 (off) or a positive whole number of milliseconds")
		}
		if r := z.H3Resolution; r < 0 || r > 15 {
			v.add("dead_zones.h3_resolution", strconv.Itoa(r), ErrOutOfRange, "must be between 0 and 15")
		}
		if z.MaxCells <= 0 {
			v.add("dead_zones.max_cells", strconv.Itoa(z.MaxCells), ErrNotPositive, "must be positive")
		}
	}
	if c.State.Dir == "" {
		v.add("state.dir", "", ErrRequired, "")
	}
	v.positive("state.checkpoint_interval", c.State.CheckpointInterval)
	if !slices.Contains(WALSyncModes, c.State.WALSync) {
		v.add("state.wal_sync", c.State.WALSync, ErrInvalid, "must be one of "+strings.Join(WALSyncModes, ", "))
	}
	v.positive("state.wal_batch_interval", c.State.WALBatchInterval)
	if c.State.WALBatchMax <= 0 {
		v.add("state.wal_batch_max", strconv.Itoa(c.State.WALBatchMax), ErrNotPositive, "must be positive")
	}
	v.listen("http.listen", c.HTTP.Listen)
	if c.Limits.MaxCouriers <= 0 {
		v.add("limits.max_couriers", strconv.Itoa(c.Limits.MaxCouriers), ErrNotPositive, "must be positive")
	}
	v.tiles("http.board_tiles", c.HTTP.BoardTiles)
	if v.positive("lake.roll_interval", c.Lake.RollInterval) && c.Lake.RollInterval%time.Millisecond != 0 {
		v.add("lake.roll_interval", c.Lake.RollInterval.String(), ErrInvalid, "must be a whole number of milliseconds")
	}
	if r := c.Lake.Retention; r < 0 || r%(24*time.Hour) != 0 {
		v.add("lake.retention", r.String(), ErrInvalid, "must be 0 (keep for ever) or a whole number of days (24h, 720h)")
	}
	if !slices.Contains(LogLevels, c.Log.Level) {
		v.add("log.level", c.Log.Level, ErrInvalid, "must be one of "+strings.Join(LogLevels, ", "))
	}
	return v.errs
}

// tiles checks a tile URL template: empty, or an http(s) URL or an absolute
// path with {z}, {x} and {y}.
func (v *validator) tiles(field, t string) {
	if t == "" {
		return
	}
	for _, p := range []string{"{z}", "{x}", "{y}"} {
		if !strings.Contains(t, p) {
			v.add(field, t, ErrInvalid, "a tile URL template needs {z}, {x} and {y}")
			return
		}
	}
	if !strings.HasPrefix(t, "/") || strings.HasPrefix(t, "//") {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(field, t, ErrInvalid, "must be http://HOST/…, https://HOST/… or a path /…")
			return
		}
		if u.User != nil {
			v.add(field, "", ErrInvalid, "credentials must not be in the URL")
		}
	}
}

func (m MQTT) validate(v *validator) {
	scheme := v.url("mqtt.url", m.URL, "mqtt", "mqtts")
	if m.Topic == "" {
		v.add("mqtt.topic", "", ErrRequired, "")
	} else if reason := topicFilterProblem(m.Topic); reason != "" {
		v.add("mqtt.topic", m.Topic, ErrInvalid, reason)
	}
	if m.ClientID == "" {
		v.add("mqtt.client_id", "", ErrRequired, "")
	} else if !printable(m.ClientID) || len(m.ClientID) > math.MaxUint16 {
		v.add("mqtt.client_id", m.ClientID, ErrInvalid, "must be printable UTF-8 of at most 65535 bytes")
	}
	if !printable(m.Username) || len(m.Username) > math.MaxUint16 {
		v.add("mqtt.username", m.Username, ErrInvalid, "must be printable UTF-8 of at most 65535 bytes")
	}
	v.envName("mqtt.password_env", m.PasswordEnv)
	if m.MaxPacketSize < MinMaxPacketSize || m.MaxPacketSize > MaxMaxPacketSize {
		v.add("mqtt.max_packet_size", strconv.Itoa(m.MaxPacketSize), ErrOutOfRange,
			fmt.Sprintf("must be between %d (1KiB) and %d (256MiB) bytes", MinMaxPacketSize, MaxMaxPacketSize))
	}
	if !slices.Contains(Formats, m.Format) {
		v.add("mqtt.format", m.Format, ErrInvalid, "must be one of "+strings.Join(Formats, ", "))
	}
	if !slices.Contains(OwnTracksCouriers, m.OwnTracksCourier) {
		v.add("mqtt.owntracks_courier", m.OwnTracksCourier, ErrInvalid, "must be one of "+strings.Join(OwnTracksCouriers, ", "))
	} else if m.Format == "owntracks" && m.Topic != "" {
		// The courier is a '+' level of the topic: without it every
		// message would be bad_courier.
		need := 1
		if m.OwnTracksCourier == "device" {
			need = 2
		}
		if plusLevels(m.Topic) < need {
			v.add("mqtt.topic", m.Topic, ErrInvalid, fmt.Sprintf("needs %d \"+\" level(s) with format owntracks and owntracks_courier %s: the courier is that level (e.g. owntracks/+/+)", need, m.OwnTracksCourier))
		}
	}
	if m.CAFile != "" && scheme != "mqtts" {
		v.add("mqtt.ca_file", m.CAFile, ErrInvalid, "is only used with an mqtts:// url")
	}
	if v.positive("mqtt.session_expiry", m.SessionExpiry) {
		switch {
		case m.SessionExpiry%time.Second != 0:
			v.add("mqtt.session_expiry", m.SessionExpiry.String(), ErrInvalid, "must be a whole number of seconds (MQTT counts it in seconds)")
		case m.SessionExpiry/time.Second > math.MaxUint32:
			v.add("mqtt.session_expiry", m.SessionExpiry.String(), ErrOutOfRange, "must be at most 4294967295s")
		}
	}
}

func (n NATS) validate(v *validator) {
	if n.URL != "embedded" && strings.Contains(n.URL, ",") {
		for _, u := range strings.Split(n.URL, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				v.add("nats.url", n.URL, ErrInvalid, "empty entry in the comma-separated list")
				break
			}
			if v.url("nats.url", u, "nats", "tls") == "" {
				break
			}
		}
	} else {
		v.url("nats.url", n.URL, "nats", "tls")
	}
	if n.SubjectPrefix == "" {
		v.add("nats.subject_prefix", "", ErrRequired, "")
	} else if reason := subjectProblem(n.SubjectPrefix); reason != "" {
		v.add("nats.subject_prefix", n.SubjectPrefix, ErrInvalid, reason)
	}
	v.envName("nats.creds_env", n.CredsEnv)
	v.name("nats.stream", n.Stream)
	dupOK := v.millis("nats.duplicate_window", n.DuplicateWindow, true)
	v.millis("nats.kv_interval", n.KVInterval, true)
	switch {
	case n.MaxAge < 0:
		v.add("nats.max_age", n.MaxAge.String(), ErrNegative, "must not be negative (0 = no age bound)")
	case n.MaxAge%time.Second != 0:
		v.add("nats.max_age", n.MaxAge.String(), ErrInvalid, "must be a whole number of seconds")
	case n.MaxAge > 0 && dupOK && n.DuplicateWindow > n.MaxAge:
		// JetStream refuses a stream whose dedup window outlives its messages.
		v.add("nats.duplicate_window", n.DuplicateWindow.String(), ErrOutOfRange,
			fmt.Sprintf("must not be longer than nats.max_age (%s)", n.MaxAge))
	}
	if n.MaxBytes < 0 {
		v.add("nats.max_bytes", strconv.FormatInt(n.MaxBytes, 10), ErrNegative, "must not be negative (0 = no size bound)")
	}
}

func (j JetStream) validate(v *validator) {
	v.name("jetstream.stream", j.Stream)
	if j.Subject == "" {
		v.add("jetstream.subject", "", ErrRequired, "")
	} else if reason := partitionSubjectProblem(j.Subject); reason != "" {
		v.add("jetstream.subject", j.Subject, ErrInvalid, reason)
	}
	if j.Partitions < 1 || j.Partitions > MaxPartitions {
		v.add("jetstream.partitions", strconv.Itoa(j.Partitions), ErrOutOfRange, fmt.Sprintf("must be between 1 and %d", MaxPartitions))
	}
	v.name("jetstream.consumer", j.Consumer)
	if v.millis("jetstream.pin_ttl", j.PinTTL, true) && j.PinTTL < time.Second {
		v.add("jetstream.pin_ttl", j.PinTTL.String(), ErrOutOfRange, "must be at least 1s: the owner renews its pin several times per ttl")
	}
	if j.MaxOwned < 0 || j.MaxOwned > MaxPartitions {
		v.add("jetstream.max_owned", strconv.Itoa(j.MaxOwned), ErrOutOfRange, fmt.Sprintf("must be between 0 (no limit) and %d", MaxPartitions))
	}
	if j.Replicas < 1 || j.Replicas > 5 {
		v.add("jetstream.replicas", strconv.Itoa(j.Replicas), ErrOutOfRange, "must be between 1 and 5")
	}
	switch {
	case j.MaxAge < 0:
		v.add("jetstream.max_age", j.MaxAge.String(), ErrNegative, "must not be negative (0 = no age bound)")
	case j.MaxAge%time.Second != 0:
		v.add("jetstream.max_age", j.MaxAge.String(), ErrInvalid, "must be a whole number of seconds")
	}
	if !slices.Contains(Ingests, j.Ingest) {
		v.add("jetstream.ingest", j.Ingest, ErrInvalid, "must be one of "+strings.Join(Ingests, ", "))
	}
	if j.MaxBytes < 0 {
		v.add("jetstream.max_bytes", strconv.FormatInt(j.MaxBytes, 10), ErrNegative, "must not be negative (0 = no size bound)")
	}
	if !printable(j.Instance) || len(j.Instance) > 128 {
		v.add("jetstream.instance", j.Instance, ErrInvalid, "must be printable UTF-8 of at most 128 bytes")
	}
}

// name checks a JetStream stream or consumer name.
func (v *validator) name(field, s string) {
	switch {
	case s == "":
		v.add(field, "", ErrRequired, "")
	case len(s) > 200:
		v.add(field, s, ErrInvalid, "must be at most 200 bytes")
	case strings.ContainsAny(s, ".*>/\\") || strings.IndexFunc(s, notGraphic) >= 0:
		v.add(field, s, ErrInvalid, `must not contain spaces, control characters or any of . * > / \`)
	}
}

// partitionSubjectProblem returns why s is not a partition subject pattern
// (valid tokens, exactly one "{partition}", the last one "*"), or "".
func partitionSubjectProblem(s string) string {
	toks := strings.Split(s, ".")
	if len(toks) < 2 || toks[len(toks)-1] != "*" {
		return `the last token must be "*" (the courier id)`
	}
	n := 0
	for _, tok := range toks[:len(toks)-1] {
		switch {
		case tok == PartitionToken:
			n++
		case tok == "":
			return "empty token: no leading, trailing or double dots"
		case strings.ContainsAny(tok, "*>{}"):
			return `only the last token may be a wildcard, and "{partition}" must be a whole token`
		case strings.IndexFunc(tok, notGraphic) >= 0:
			return "spaces and control characters are not allowed"
		}
	}
	if n != 1 {
		return `must hold the token "{partition}" exactly once`
	}
	return ""
}

func (w Windows) validate(v *validator) {
	sizeOK := v.millis("windows.size", w.Size, true)
	slideOK := v.millis("windows.slide", w.Slide, true)
	if sizeOK && slideOK {
		n := w.Size / w.Slide
		if w.Size%w.Slide != 0 {
			n++
		}
		switch {
		case w.Slide > w.Size:
			v.add("windows.slide", w.Slide.String(), ErrOutOfRange, fmt.Sprintf("must not be larger than windows.size (%s)", w.Size))
		case n > MaxWindowsPerPosition:
			v.add("windows.slide", w.Slide.String(), ErrOutOfRange,
				fmt.Sprintf("too small for windows.size %s: a position would join %d windows (at most %d)", w.Size, n, MaxWindowsPerPosition))
		}
	}
	v.millis("windows.gap", w.Gap, true)
	v.millis("windows.tolerated_delay", w.ToleratedDelay, false)
	lateOK := v.millis("windows.allowed_lateness", w.AllowedLateness, false)
	if lateOK && slideOK && w.Slide > 0 && w.AllowedLateness/w.Slide > MaxWindowsPerPosition {
		// A late position revises up to allowed_lateness / slide windows.
		v.add("windows.allowed_lateness", w.AllowedLateness.String(), ErrOutOfRange,
			fmt.Sprintf("too long for windows.slide %s: a late position could revise %d windows (at most %d)", w.Slide, w.AllowedLateness/w.Slide, MaxWindowsPerPosition))
	}
	v.millis("windows.idle_timeout", w.IdleTimeout, false)
	v.millis("windows.max_future_skew", w.MaxFutureSkew, false)
	if v.millis("windows.restore_ttl", w.RestoreTTL, true) && lateOK {
		// A courier forgotten with a window or session open, or a fired
		// window still retained, would lose it.
		switch need := max(w.Size+w.AllowedLateness, w.Gap); {
		case w.RestoreTTL >= need:
		case w.AllowedLateness > 0:
			v.add("windows.restore_ttl", w.RestoreTTL.String(), ErrOutOfRange,
				fmt.Sprintf("must be at least max(windows.size + windows.allowed_lateness, windows.gap) (%s), since windows.allowed_lateness is %s", need, w.AllowedLateness))
		default:
			v.add("windows.restore_ttl", w.RestoreTTL.String(), ErrOutOfRange,
				fmt.Sprintf("must be at least max(windows.size, windows.gap) (%s)", need))
		}
	}
}

func (d Distance) validate(v *validator) {
	for _, f := range []struct {
		key string
		val float64
	}{
		{"distance.min_move_m", d.MinMoveM},
		{"distance.max_speed_kmh", d.MaxSpeedKmh},
		{"distance.stopped_below_m", d.StoppedBelowM},
	} {
		s := strconv.FormatFloat(f.val, 'g', -1, 64)
		switch {
		case math.IsNaN(f.val) || math.IsInf(f.val, 0):
			v.add(f.key, s, ErrInvalid, "must be a finite number")
		case f.val < 0:
			v.add(f.key, s, ErrNegative, "")
		}
	}
}

// positive reports ErrNotPositive unless d > 0, and says whether it is.
func (v *validator) positive(field string, d time.Duration) bool {
	if d <= 0 {
		v.add(field, d.String(), ErrNotPositive, "")
		return false
	}
	return true
}

// millis checks d is > 0 (or >= 0 unless positive) and a whole number of
// milliseconds, and says whether it passed. Whole milliseconds because the
// engine keeps time in integer milliseconds: a finer duration would be
// silently truncated.
func (v *validator) millis(field string, d time.Duration, positive bool) bool {
	switch {
	case positive && d <= 0:
		v.add(field, d.String(), ErrNotPositive, "")
	case d < 0:
		v.add(field, d.String(), ErrNegative, "")
	case d%time.Millisecond != 0:
		v.add(field, d.String(), ErrInvalid, "must be a whole number of milliseconds")
	default:
		return true
	}
	return false
}

func (v *validator) envName(field, name string) {
	if name != "" && !envRe.MatchString(name) {
		v.add(field, name, ErrInvalid, "must be the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*), not the secret itself")
	}
}

// url checks a broker URL: the literal "embedded" or SCHEME://HOST[:PORT]
// with one of schemes. It returns the scheme ("embedded" for the literal),
// or "" after reporting a problem.
func (v *validator) url(field, raw string, schemes ...string) string {
	if raw == "" {
		v.add(field, "", ErrRequired, "")
		return ""
	}
	if raw == "embedded" {
		return raw
	}
	want := strings.Join(schemes, "://, ") + `:// or "embedded"`
	u, err := url.Parse(raw)
	if err != nil {
		v.add(field, raw, ErrInvalid, "not a URL: "+errReason(err))
		return ""
	}
	if !slices.Contains(schemes, u.Scheme) {
		v.add(field, u.Redacted(), ErrInvalid, "must be "+want)
		return ""
	}
	if u.User != nil {
		// The value would be echoed in logs and errors: never quote it.
		v.add(field, "", ErrInvalid, "credentials must not be in the URL: secrets come only from the environment")
		return ""
	}
	if u.Hostname() == "" || u.Opaque != "" {
		v.add(field, raw, ErrInvalid, "missing host: must be "+schemes[0]+"://HOST[:PORT]")
		return ""
	}
	if p := u.Port(); p != "" {
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			v.add(field, raw, ErrInvalid, "port must be a number 0-65535")
			return ""
		}
	}
	return u.Scheme
}

func (v *validator) listen(field, addr string) {
	if addr == "" {
		v.add(field, "", ErrRequired, "")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(field, addr, ErrInvalid, "must be host:port: "+errReason(err))
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.add(field, addr, ErrInvalid, "port must be a number 0-65535")
	}
}

// topicFilterProblem returns why s is not a valid MQTT topic filter, or "".
func topicFilterProblem(s string) string {
	switch {
	case len(s) > math.MaxUint16:
		return "longer than 65535 bytes"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.ContainsRune(s, 0):
		return "contains a NUL character"
	}
	levels := strings.Split(s, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return `"#" must be the last level`
		case l != "#" && strings.Contains(l, "#"):
			return `"#" must be a whole level`
		case l != "+" && strings.Contains(l, "+"):
			return `"+" must be a whole level`
		}
	}
	return ""
}

// plusLevels counts the '+' levels of a topic filter.
func plusLevels(filter string) int {
	n := 0
	for _, l := range strings.Split(filter, "/") {
		if l == "+" {
			n++
		}
	}
	return n
}

// subjectProblem returns why s cannot start a NATS subject, or "".
func subjectProblem(s string) string {
	for _, tok := range strings.Split(s, ".") {
		switch {
		case tok == "":
			return "empty token: no leading, trailing or double dots"
		case strings.ContainsAny(tok, "*>"):
			return `wildcards "*" and ">" are not allowed`
		case strings.IndexFunc(tok, notGraphic) >= 0:
			return "spaces and control characters are not allowed"
		}
	}
	return ""
}

func notGraphic(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }

func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// errReason keeps the useful tail of a url/net error, whose text repeats
// the whole input.
func errReason(err error) string {
	switch e := err.(type) {
	case *url.Error:
		return e.Err.Error()
	case *net.AddrError:
		return e.Err
	}
	return err.Error()
}
