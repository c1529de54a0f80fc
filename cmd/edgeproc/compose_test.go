package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/km0/edgeproc/config"
)

// compose is the part of a compose file the test checks.
type compose struct {
	Services map[string]struct {
		Image   string
		Command []string
		Build   *struct{ Context, Dockerfile string }
		Volumes []string
		Ports   []string
	}
	Volumes map[string]any
}

// The image is not built here (no container engine), so deploy/compose.yaml
// is checked by reading it: every file it mounts or builds from exists,
// the configuration it mounts is valid and names the other services by
// their compose names and ports, the published port is http.listen's, and
// the Dockerfile runs and probes that same file.
func TestCompose_AgreesWithItsFiles(t *testing.T) {
	const deploy = "../../deploy"
	var c compose
	mustYAML(t, filepath.Join(deploy, "compose.yaml"), &c)
	for _, name := range []string{"mosquitto", "nats", "edgeproc"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("no service %q", name)
		}
	}

	// Every bind mount's file exists; every named volume is declared.
	mounts := map[string]map[string]string{} // service -> target -> host file
	for name, s := range c.Services {
		mounts[name] = map[string]string{}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("%s: volume %q has no target", name, v)
				continue
			}
			src, dst := parts[0], parts[1]
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				host := filepath.Join(deploy, src)
				if _, err := os.Stat(host); err != nil {
					t.Errorf("%s: mounted file: %v", name, err)
				}
				mounts[name][dst] = host
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: volume %q is not declared under volumes", name, src)
			} else {
				mounts[name][dst] = ""
			}
		}
	}

	// edgeproc: built from the repository's Dockerfile, which runs and
	// probes the mounted configuration.
	ep := c.Services["edgeproc"]
	if ep.Build == nil {
		t.Fatal("edgeproc: no build")
	}
	dockerfile := filepath.Join(deploy, ep.Build.Context, ep.Build.Dockerfile)
	run, health, expose := dockerfileCommands(t, dockerfile)
	cfgPath := flagValue(run, "--config")
	if cfgPath == "" || flagValue(health, "--config") != cfgPath || !slices.Equal(health[:2], []string{"edgeproc", "health"}) {
		t.Fatalf("%s: CMD %q and HEALTHCHECK %q do not run and probe one --config", dockerfile, run, health)
	}
	hostCfg, ok := mounts["edgeproc"][cfgPath]
	if !ok || hostCfg == "" {
		t.Fatalf("edgeproc: nothing mounted at the Dockerfile's --config %s", cfgPath)
	}
	cfg, err := config.Load(hostCfg)
	if err != nil {
		t.Fatal(err)
	}

	// http.listen: on every interface of the container, its port
	// published and exposed, and the health check's URL on that port.
	host, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
		t.Errorf("http.listen %q: not reachable from outside the container", cfg.HTTP.Listen)
	}
	if !slices.ContainsFunc(ep.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
		t.Errorf("edgeproc: ports %q do not publish http.listen's port %s", ep.Ports, port)
	}
	if !slices.Contains(expose, port) {
		t.Errorf("%s: EXPOSE %q lacks http.listen's port %s", dockerfile, expose, port)
	}
	if u, err := healthURL(cfg.HTTP); err != nil || u != "http://127.0.0.1:"+port+"/healthz" {
		t.Errorf("health --config probes %q (%v), want http://127.0.0.1:%s/healthz", u, err, port)
	}
	// state.dir is in a volume, so it outlives the container.
	if !slices.ContainsFunc(mapKeys(mounts["edgeproc"]), func(dst string) bool {
		return mounts["edgeproc"][dst] == "" && strings.HasPrefix(cfg.State.Dir, dst+"/")
	}) {
		t.Errorf("state.dir %s is in no named volume of edgeproc", cfg.State.Dir)
	}

	// mqtt.url names the mosquitto service on the port its mounted
	// configuration listens on, on every interface.
	mqttURL, err := url.Parse(cfg.MQTT.URL)
	if err != nil || mqttURL.Hostname() != "mosquitto" {
		t.Fatalf("mqtt.url %q does not name the mosquitto service", cfg.MQTT.URL)
	}
	confPath, ok := mounts["mosquitto"]["/mosquitto/config/mosquitto.conf"]
	if !ok || confPath == "" {
		t.Fatal("mosquitto: no configuration mounted at /mosquitto/config/mosquitto.conf")
	}
	conf := mosquittoConf(t, confPath)
	if got := conf["listener"]; !slices.Contains(got, port0(mqttURL, "1883")+" 0.0.0.0") && !slices.Contains(got, port0(mqttURL, "1883")) {
		t.Errorf("mqtt.url %s: mosquitto listens on %q", cfg.MQTT.URL, got)
	}
	// The same settings as examples/mosquitto.conf, but where it listens
	// and where it persists (the container's volume).
	example := mosquittoConf(t, "../../examples/mosquitto.conf")
	for _, k := range []string{"listener", "persistence_location"} {
		delete(conf, k)
		delete(example, k)
	}
	if a, b := mustJSON(t, conf), mustJSON(t, example); a != b {
		t.Errorf("%s differs from examples/mosquitto.conf:\n got %s\nwant %s", confPath, a, b)
	}

	// nats.url names the nats service on its client port, JetStream on.
	natsURL, err := url.Parse(cfg.NATS.URL)
	if err != nil || natsURL.Hostname() != "nats" {
		t.Fatalf("nats.url %q does not name the nats service", cfg.NATS.URL)
	}
	nc := c.Services["nats"].Command
	natsPort := flagValue(append([]string{""}, nc...), "--port")
	if natsPort == "" {
		natsPort = "4222"
	}
	if port0(natsURL, "4222") != natsPort {
		t.Errorf("nats.url %s: nats-server listens on %s", cfg.NATS.URL, natsPort)
	}
	if !slices.Contains(nc, "--jetstream") && !slices.Contains(nc, "-js") {
		t.Errorf("nats: command %q does not enable JetStream", nc)
	}
}

// port0 is u's port, def when it has none.
func port0(u *url.URL, def string) string {
	if p := u.Port(); p != "" {
		return p
	}
	return def
}

func mapKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// flagValue is the argument after name in args ("" if none).
func flagValue(args []string, name string) string {
	i := slices.Index(args, name)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// dockerfileCommands reads the final stage's ENTRYPOINT + CMD (what runs),
// HEALTHCHECK's command and EXPOSEd ports, each in exec (JSON) form.
func dockerfileCommands(t *testing.T, file string) (run, health, expose []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var entry, cmd []string
	exec := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &v); err != nil {
			t.Fatalf("%s: %q is not in exec form: %v", file, s, err)
		}
		return v
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "ENTRYPOINT":
			entry = exec(rest)
		case "CMD":
			cmd = exec(rest)
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				expose = append(expose, strings.TrimSuffix(p, "/tcp"))
			}
		case "HEALTHCHECK":
			_, after, ok := strings.Cut(rest, " CMD ")
			if !ok {
				t.Fatalf("%s: HEALTHCHECK without CMD", file)
			}
			health = exec(after)
		}
	}
	if len(health) < 2 {
		t.Fatalf("%s: no HEALTHCHECK command", file)
	}
	return append(entry, cmd...), health, expose
}

// mosquittoConf reads a Mosquitto configuration: each key's values, in
// order, comments and blank lines dropped.
func mosquittoConf(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		conf[k] = append(conf[k], strings.TrimSpace(v))
	}
	return conf
}

func mustYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
