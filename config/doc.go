// Package config loads and validates one market's YAML configuration.
//
// One file configures one market (contract §6). Every key is optional
// except market; a file holding only `market: girona` gets every default.
// Unknown keys at any level are errors naming the full dotted key
// (windows.sizee), so typos are caught before anything starts. Durations are
// Go syntax strings (45s, 5m, 1h30m; a bare 0 is accepted). A key whose
// value is null (`topic:` with nothing after it) keeps its default.
//
//	market: girona                  # required, [a-z0-9_-]{1,32}
//	timezone: Europe/Madrid         # IANA name, default UTC: the market's calendar day (lake, daily, board)
//	source: mqtt                    # mqtt (default) or jetstream: the partitioned stream below
//	jetstream:                      # only used with source: jetstream (docs/scale-out.md)
//	  stream: POSITIONS_GIRONA      # default POSITIONS_ + upper(MARKET); created if missing
//	  subject: part.girona.{partition}.*  # default part.MARKET.{partition}.*; last token the courier
//	  partitions: 4                 # 1..1024, the N of the server's partition(N, ...) mapping
//	  consumer: edgeproc-girona     # durable consumers CONSUMER-0 ... CONSUMER-(N-1)
//	  pin_ttl: 10s                  # >= 1s; an owner silent this long loses its partitions
//	  max_owned: 2                  # cap on the partitions owned at once (they balance by themselves); 0 = none
//	  replicas: 3                   # 1..5; stream (if created here), checkpoint bucket and store
//	  max_age: 24h                  # positions kept (if created here); 0 or >= max(1h, 10 × checkpoint_interval)
//	  max_bytes: 0                  # positions stream size bound (if created here); 0 = none
//	  ingest: mqtt                  # mqtt (one instance at a time relays the mqtt section's broker, acking once stored) or gateway (nats-server's MQTT gateway)
//	  instance: edgeproc-a          # this instance's name; default host name and pid
//	mqtt:
//	  url: mqtt://127.0.0.1:1883    # mqtt://, mqtts:// (TLS) or "embedded"
//	  topic: km0/girona/positions/+ # default km0/MARKET/positions/+
//	  client_id: edgeproc-girona    # default edgeproc-MARKET; persistent session identity
//	  username: edgeproc            # optional
//	  password_env: EDGEPROC_MQTT_PASSWORD  # env var NAME holding the password; optional
//	  ca_file: /etc/ssl/km0-ca.pem  # PEM CA bundle, mqtts:// only; optional (system pool)
//	  session_expiry: 24h           # broker keeps the session this long; whole seconds
//	  max_packet_size: 1MiB         # largest payload delivered, bytes (1KiB..256MiB); announced in CONNECT
//	  format: edgeproc              # edgeproc (contract §2) or owntracks (the OwnTracks app's location messages)
//	  owntracks_courier: user       # owntracks: the courier is the topic's USER (default) or DEVICE level
//	nats:
//	  url: nats://127.0.0.1:4222    # nats://, tls:// (comma-separated list allowed) or "embedded"
//	  subject_prefix: delivery      # -> delivery.dashboard.girona.distance, ...
//	  creds_env: EDGEPROC_NATS_CREDS        # env var NAME holding the .creds text; optional
//	  stream: EDGEPROC_GIRONA       # default EDGEPROC_ + upper(MARKET), '-' -> '_'
//	  duplicate_window: 10m         # JetStream dedup window for re-emitted results, <= max_age
//	  kv_interval: 15s              # courier KV: a position at most this stale; status changes at once
//	  max_age: 24h                  # results older than this are deleted; 0 = no age bound
//	  max_bytes: 1GiB               # past this size the oldest results go; bytes or 512MiB, 2GB; 0 = no bound
//	windows:                        # event time, contract §3; whole milliseconds
//	  size: 5m                      # sliding distance window, > 0
//	  slide: 1m                     # > 0 and <= size (need not divide it)
//	  gap: 3m                       # session inactivity gap, > 0
//	  tolerated_delay: 45s          # wm = max_ts - tolerated_delay, >= 0
//	  allowed_lateness: 0s          # fired distance windows take late positions this long, re-emitted as revisions
//	  idle_timeout: 30s             # >= 0; 0 = never advance the watermark on idleness
//	  max_future_skew: 1m           # >= 0; timestamps further ahead are rejected
//	  restore_ttl: 24h              # >= max(size + allowed_lateness, gap); a courier silent this long (event time) is forgotten
//	distance:                       # contract §5; each finite and >= 0, 0 = filter off
//	  min_move_m: 15                # anchor radius: movement within it (or the accuracy) is jitter
//	  max_speed_kmh: 150            # faster segments are outlier jumps
//	  stopped_below_m: 50           # a window with less distance is "stopped"
//	geo:
//	  h3_resolution: 9              # 0..15
//	state:
//	  dir: ./state/girona           # default ./state/MARKET; WAL and checkpoints
//	  checkpoint_interval: 10s      # > 0
//	  wal_sync: batch               # batch (group commit), always (fsync each) or none (no fsync)
//	  wal_batch_interval: 40ms      # under load a group commit waits at most this long...
//	  wal_batch_max: 1024           # ...or as soon as this many entries wait
//	http:
//	  listen: 127.0.0.1:9464        # host:port with a numeric port
//	  board: true                   # the fleet board at /board/ (read-only)
//	  board_tiles: ""               # optional tile URL template, http(s)://… or /… with {z}, {x}, {y}
//	  web_config: ""                # optional: TLS and basic-auth users (Prometheus exporter web config file) for every endpoint
//	limits:
//	  max_couriers: 200000          # > 0; couriers tracked at most; beyond: courier_limit
//	lake:                           # every accepted position as Parquet (contract §7)
//	  dir: ""                       # default empty: no lake; else DIR/positions/market=M/date=D/
//	  roll_interval: 10m            # > 0; a position is in a file at most this long after it arrives
//	  retention: 0                  # 0 = keep; else whole days (720h): older date folders are deleted
//	log:
//	  level: info                   # debug, info, warn or error; process-wide (most verbose file wins)
//
// Secrets never come from the file: password_env and creds_env name
// environment variables, read only when MQTT.Password or NATS.Creds is
// called, and a URL with credentials in it is refused. Parsing has no side
// effects; LoadLive, for the commands that connect, also checks that those
// variables are set.
//
// Sizes (max_packet_size) are an integer number of bytes or a whole number
// with a unit: B, kB/KB (1000), KiB (1024), MB, MiB, GB, GiB.
//
// Every problem is a *FieldError naming the file, line, dotted key, value
// and reason, and unwrapping to one of the Err* sentinels; Parse and
// Validate report all problems at once as an errors.Join (see FieldErrors):
//
//	girona.yaml:14: windows.gap = "0s": must be positive
//	girona.yaml:3: invalid YAML: mapping values are not allowed in this context
//
// Several markets in one process must not share what is a market's own
// (CheckClashes), and a market's topic should not name another market
// (Warnings); `edgeproc run` and `edgeproc check-config` apply both.
package config
