package config

import "os"

// LoadLive is Load for the commands that connect (run, check-config): it
// also requires every environment variable the file names (password_env,
// creds_env) to be set and non-empty, reporting each that is not as a
// *FieldError (ErrEnvUnset) naming the key and the variable. Load alone
// does not, so a replay does not need the secrets.
func LoadLive(path string) (Config, error) {
	f, err := open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	c, lines, err := parse(f, path)
	if err != nil {
		return Config{}, err
	}
	fes := c.checkEnv(os.LookupEnv)
	for _, fe := range fes {
		fe.File, fe.Line = path, lines[fe.Field]
	}
	if len(fes) > 0 {
		return Config{}, joinFieldErrors(fes)
	}
	return c, nil
}

// checkEnv reports each secret variable the config names that lookup does
// not find set and non-empty.
func (c Config) checkEnv(lookup func(string) (string, bool)) []*FieldError {
	var fes []*FieldError
	for _, f := range []struct{ key, name string }{
		{"mqtt.password_env", c.MQTT.PasswordEnv},
		{"nats.creds_env", c.NATS.CredsEnv},
	} {
		if f.name == "" {
			continue
		}
		switch v, ok := lookup(f.name); {
		case !ok:
			fes = append(fes, &FieldError{Field: f.key, Value: f.name, Err: ErrEnvUnset,
				Reason: "environment variable " + f.name + " is not set"})
		case v == "":
			fes = append(fes, &FieldError{Field: f.key, Value: f.name, Err: ErrEnvUnset,
				Reason: "environment variable " + f.name + " is set but empty"})
		}
	}
	return fes
}

// Password returns the MQTT password: the value of the environment variable
// named by PasswordEnv, read now, or "" when PasswordEnv is empty or the
// variable is unset.
func (m MQTT) Password() string {
	if m.PasswordEnv == "" {
		return ""
	}
	return os.Getenv(m.PasswordEnv)
}

// Creds returns the NATS user credentials (the text of a .creds file, JWT
// and seed): the value of the environment variable named by CredsEnv, read
// now, or "" when CredsEnv is empty or the variable is unset.
func (n NATS) Creds() string {
	if n.CredsEnv == "" {
		return ""
	}
	return os.Getenv(n.CredsEnv)
}
