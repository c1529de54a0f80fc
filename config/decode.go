package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder overlays a YAML document on a Config by walking the yaml.Node
// tree itself, so that every problem carries the full dotted key and line
// (yaml's KnownFields only reports the bare key).
type decoder struct {
	lines map[string]int // dotted key -> line, for every key set to a non-null value
	errs  []*FieldError
	fatal bool // the file is not a mapping of keys at all: no value rule applies
}

// yamlLineRe finds the line in a YAML syntax error ("yaml: line 3: did not
// find expected key"), so that it is reported as file:3 like every other
// problem.
var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntax records a YAML syntax error, in file:line form when it has a line.
func (d *decoder) syntax(err error) {
	fe := &FieldError{Err: ErrSyntax, Reason: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
		fe.Reason = "invalid YAML: " + m[2]
	}
	d.errs = append(d.errs, fe)
	d.fatal = true
}

// field is one key of a mapping and what to do with its value.
type field struct {
	key string
	set func(path string, n *yaml.Node)
}

func (d *decoder) fail(n *yaml.Node, path, value string, err error, reason string) {
	d.errs = append(d.errs, &FieldError{Line: n.Line, Field: path, Value: value, Reason: reason, Err: err})
}

func (d *decoder) decode(r io.Reader, c *Config) {
	dec := yaml.NewDecoder(r)
	var doc yaml.Node
	d.fatal = true // until the file turns out to be a mapping
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errs = append(d.errs, &FieldError{Err: ErrEmpty})
			return
		}
		d.syntax(err)
		return
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err)
		return
	default:
		d.fail(&extra, "", "", ErrSyntax, "more than one YAML document: one file holds one market")
		return
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	root = resolve(root)
	if isNull(root) {
		d.errs = append(d.errs, &FieldError{Err: ErrEmpty})
		return
	}
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "", ErrWrongType, "the file must be a mapping of keys (market: ..., mqtt: ...), not "+kindName(root))
		return
	}
	d.fatal = false
	d.mapping("", root, []field{
		{"market", d.str(&c.Market)},
		{"timezone", d.str(&c.Timezone)},
		{"source", d.str(&c.Source)},
		{"jetstream", d.section([]field{
			{"stream", d.str(&c.JetStream.Stream)},
			{"subject", d.str(&c.JetStream.Subject)},
			{"partitions", d.int(&c.JetStream.Partitions)},
			{"consumer", d.str(&c.JetStream.Consumer)},
			{"pin_ttl", d.duration(&c.JetStream.PinTTL)},
			{"max_owned", d.int(&c.JetStream.MaxOwned)},
			{"replicas", d.int(&c.JetStream.Replicas)},
			{"max_age", d.duration(&c.JetStream.MaxAge)},
			{"max_bytes", d.size(&c.JetStream.MaxBytes, math.MaxInt64)},
			{"ingest", d.str(&c.JetStream.Ingest)},
			{"instance", d.str(&c.JetStream.Instance)},
		})},
		{"mqtt", d.section([]field{
			{"url", d.str(&c.MQTT.URL)},
			{"topic", d.str(&c.MQTT.Topic)},
			{"client_id", d.str(&c.MQTT.ClientID)},
			{"username", d.str(&c.MQTT.Username)},
			{"password_env", d.str(&c.MQTT.PasswordEnv)},
			{"ca_file", d.str(&c.MQTT.CAFile)},
			{"session_expiry", d.duration(&c.MQTT.SessionExpiry)},
			{"max_packet_size", d.sizeInt(&c.MQTT.MaxPacketSize)},
			{"format", d.str(&c.MQTT.Format)},
			{"owntracks_courier", d.str(&c.MQTT.OwnTracksCourier)},
		})},
		{"nats", d.section([]field{
			{"url", d.str(&c.NATS.URL)},
			{"subject_prefix", d.str(&c.NATS.SubjectPrefix)},
			{"creds_env", d.str(&c.NATS.CredsEnv)},
			{"stream", d.str(&c.NATS.Stream)},
			{"duplicate_window", d.duration(&c.NATS.DuplicateWindow)},
			{"kv_interval", d.duration(&c.NATS.KVInterval)},
			{"max_age", d.duration(&c.NATS.MaxAge)},
			{"max_bytes", d.size(&c.NATS.MaxBytes, math.MaxInt64)},
		})},
		{"windows", d.section([]field{
			{"size", d.duration(&c.Windows.Size)},
			{"slide", d.duration(&c.Windows.Slide)},
			{"gap", d.duration(&c.Windows.Gap)},
			{"tolerated_delay", d.duration(&c.Windows.ToleratedDelay)},
			{"allowed_lateness", d.duration(&c.Windows.AllowedLateness)},
			{"idle_timeout", d.duration(&c.Windows.IdleTimeout)},
			{"max_future_skew", d.duration(&c.Windows.MaxFutureSkew)},
			{"restore_ttl", d.duration(&c.Windows.RestoreTTL)},
		})},
		{"distance", d.section([]field{
			{"min_move_m", d.float(&c.Distance.MinMoveM)},
			{"max_speed_kmh", d.float(&c.Distance.MaxSpeedKmh)},
			{"stopped_below_m", d.float(&c.Distance.StoppedBelowM)},
		})},
		{"geo", d.section([]field{
			{"h3_resolution", d.int(&c.Geo.H3Resolution)},
			{"service_area", d.str(&c.Geo.ServiceArea)},
		})},
		{"dead_zones", d.section([]field{
			{"window", d.duration(&c.DeadZones.Window)},
			{"h3_resolution", d.int(&c.DeadZones.H3Resolution)},
			{"max_cells", d.int(&c.DeadZones.MaxCells)},
		})},
		{"state", d.section([]field{
			{"dir", d.str(&c.State.Dir)},
			{"checkpoint_interval", d.duration(&c.State.CheckpointInterval)},
			{"wal_sync", d.str(&c.State.WALSync)},
			{"wal_batch_interval", d.duration(&c.State.WALBatchInterval)},
			{"wal_batch_max", d.int(&c.State.WALBatchMax)},
		})},
		{"http", d.section([]field{
			{"listen", d.str(&c.HTTP.Listen)},
			{"board", d.bool(&c.HTTP.Board)},
			{"board_tiles", d.str(&c.HTTP.BoardTiles)},
			{"pprof", d.bool(&c.HTTP.Pprof)},
			{"web_config", d.str(&c.HTTP.WebConfig)},
		})},
		{"limits", d.section([]field{
			{"max_couriers", d.int(&c.Limits.MaxCouriers)},
		})},
		{"lake", d.section([]field{
			{"dir", d.str(&c.Lake.Dir)},
			{"roll_interval", d.duration(&c.Lake.RollInterval)},
			{"retention", d.duration(&c.Lake.Retention)},
		})},
		{"log", d.section([]field{
			{"level", d.str(&c.Log.Level)},
		})},
	})
}

// mapping applies fields to the keys of n. A null value leaves the default
// in place, as if the key were absent.
func (d *decoder) mapping(path string, n *yaml.Node, fields []field) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "", ErrWrongType, "expected a mapping of keys, got "+kindName(n))
		return
	}
	seen := make(map[string]int, len(fields))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "", ErrWrongType, "keys must be plain names, got "+kindName(k))
			continue
		}
		p := joinKey(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, p, "", ErrDuplicateKey, fmt.Sprintf("duplicate key (first set at line %d)", first))
			continue
		}
		seen[k.Value] = k.Line
		f := lookup(fields, k.Value)
		if f == nil {
			reason := "unknown key"
			if s := suggest(fields, k.Value); s != "" {
				reason += fmt.Sprintf(" (did you mean %q?)", joinKey(path, s))
			}
			d.fail(k, p, "", ErrUnknownKey, reason)
			continue
		}
		if isNull(v) {
			continue
		}
		d.lines[p] = k.Line
		f.set(p, v)
	}
}

func (d *decoder) section(fields []field) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) { d.mapping(path, n, fields) }
}

// scalar returns n's text, or reports ErrWrongType when n is a list or map.
func (d *decoder) scalar(path string, n *yaml.Node, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "", ErrWrongType, "expected "+want+", got "+kindName(n))
		return "", false
	}
	return n.Value, true
}

// str accepts any scalar, as yaml does for a string field: a client id may
// well be written as a bare number.
func (d *decoder) str(p *string) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		if s, ok := d.scalar(path, n, "a string"); ok {
			*p = s
		}
	}
}

func (d *decoder) duration(p *time.Duration) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a duration such as 45s or 5m")
		if !ok {
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			reason := "not a Go duration: use e.g. 45s, 5m or 1h30m"
			if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
				reason = "a number needs a unit: use e.g. 45s, 5m or 1h30m (only 0 may be bare)"
			}
			d.fail(n, path, s, ErrBadDuration, reason)
			return
		}
		*p = v
	}
}

// sizeUnits are the units a size may carry, in bytes.
var sizeUnits = map[string]int64{
	"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// size accepts an integer number of bytes or a whole number with a unit
// (1MiB, 64kB, 512 KiB, 2GB), at most limit bytes.
func (d *decoder) size(p *int64, limit int64) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a size such as 1MiB or 65536")
		if !ok {
			return
		}
		num := strings.TrimRight(s, "BbKkMGTi ")
		unit := strings.TrimSpace(s[len(num):])
		mult, known := sizeUnits[unit]
		if unit == "" {
			mult, known = 1, true
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if !known || err != nil || v < 0 {
			reason := "use a whole number of bytes, or with a unit: B, kB, KiB, MB, MiB, GB, GiB, TB, TiB"
			if strings.HasPrefix(strings.TrimSpace(s), "-") {
				reason = "must not be negative"
			}
			d.fail(n, path, s, ErrBadSize, reason)
			return
		}
		if v > limit/mult {
			d.fail(n, path, s, ErrOutOfRange, "size too large")
			return
		}
		*p = v * mult
	}
}

// sizeInt is size into an int, at most math.MaxInt32 bytes.
func (d *decoder) sizeInt(p *int) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		v := int64(*p)
		d.size(&v, math.MaxInt32)(path, n)
		*p = int(v)
	}
}

func (d *decoder) bool(p *bool) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "true or false")
		if !ok {
			return
		}
		if n.ShortTag() != "!!bool" {
			d.fail(n, path, s, ErrWrongType, "expected true or false, got "+kindName(n))
			return
		}
		var v bool
		if err := n.Decode(&v); err != nil {
			d.fail(n, path, s, ErrWrongType, "expected true or false")
			return
		}
		*p = v
	}
}

func (d *decoder) float(p *float64) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a number")
		if !ok {
			return
		}
		if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
			d.fail(n, path, s, ErrWrongType, "expected a number, got "+kindName(n))
			return
		}
		var v float64
		if err := n.Decode(&v); err != nil {
			d.fail(n, path, s, ErrOutOfRange, "not representable as a number")
			return
		}
		*p = v
	}
}

func (d *decoder) int(p *int) func(string, *yaml.Node) {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "an integer")
		if !ok {
			return
		}
		if tag := n.ShortTag(); tag == "!!float" {
			d.fail(n, path, s, ErrWrongType, "expected an integer (no fraction or exponent)")
			return
		} else if tag != "!!int" {
			d.fail(n, path, s, ErrWrongType, "expected an integer, got "+kindName(n))
			return
		}
		var v int64
		if err := n.Decode(&v); err != nil || v < math.MinInt32 || v > math.MaxInt32 {
			d.fail(n, path, s, ErrOutOfRange, "integer too large")
			return
		}
		*p = int(v)
	}
}

func resolve(n *yaml.Node) *yaml.Node {
	// Bounded: yaml refuses an anchor that contains its own alias.
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		case "!!str":
			return "a string"
		}
		return "a scalar (" + n.ShortTag() + ")"
	}
	return "an unsupported node"
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func lookup(fields []field, key string) *field {
	for i := range fields {
		if fields[i].key == key {
			return &fields[i]
		}
	}
	return nil
}

// suggest returns the known key closest to a misspelt one, or "" when none
// is within two edits.
func suggest(fields []field, key string) string {
	if len(key) > 64 {
		return ""
	}
	best, bestDist := "", 3
	for _, f := range fields {
		if dist := editDistance(key, f.key); dist < bestDist {
			best, bestDist = f.key, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance over bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
