# Shell helpers shared by the scripts in this directory; source it.

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
apt_updated=""

# apt_install PACKAGE...: installs Debian packages, updating the lists once.
# It installs only: no service of the machine is started, stopped or
# reconfigured by the scripts.
apt_install() {
	echo "$(basename "$0"): installing $* from Debian" >&2
	[ -n "$apt_updated" ] || { $SUDO apt-get update -qq; apt_updated=1; }
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# need_mosquitto installs Mosquitto if it is missing; the tests and
# benchmarks start their own brokers on free loopback ports.
need_mosquitto() {
	if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
		apt_install mosquitto mosquitto-clients
	fi
}
