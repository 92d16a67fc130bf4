package systemd

import (
	"path"
	"regexp"
	"sort"
)

// defaultNeverRestart are the needrestart 3.x override_rc defaults
// (ex/needrestart.conf: units needrestart does not restart by default),
// kept in its order and spelling (unanchored at the end, matched against
// the unit's ID and the plan names that led to it, not its other aliases:
// systemd-hostnamed.service is also dbus-org.freedesktop.hostname1.service),
// followed by strata's additions for units a live
// restart must never reach.
var defaultNeverRestart = []string{
	// needrestart: DBus
	`^dbus`,
	// needrestart: display managers
	`^gdm`, `^greetd`, `^kdm`, `^nodm`, `^sddm`, `^wdm`, `^xdm`, `^lightdm`, `^slim`, `^lxdm`, `^xrdp`,
	// needrestart: networking stuff
	`^bird`, `^network`, `^NetworkManager`, `^ModemManager`, `^wpa_supplicant`, `^ifup`, `^openvpn`,
	`^quagga`, `^frr`, `^tinc`, `^(open|free|libre|strong)swan`, `^bluetooth`,
	// needrestart: gettys
	`^getty@.+\.service`,
	// needrestart: systemd --user
	`^user@\d+\.service`,
	// needrestart: misc
	`^usbguard\.service$`, `^zfs-fuse`, `^mythtv-backend`, `^xendomains`, `^lxc`, `^lxcfs`, `^libvirt`,
	`^virtlogd`, `^virtlockd`, `^docker`, `^bacula-`, `^qrtr-ns`, `^rmtfs`,
	// needrestart: systemd stuff
	`^emergency\.service$`, `^rescue\.service$`, `^elogind`,
	// needrestart: oneshot services
	`^apt-daily\.service$`, `^apt-daily-upgrade\.service$`, `^unattended-upgrades\.service$`, `^cron-.*\.service$`,
	`^rc-local\.service$`, `^systemd-logind`, `^systemd-nspawn`,
	// strata: the other gettys and the user manager's runtime directory
	`^(serial-|container-|console-)getty`, `^user-runtime-dir@`,
	// strata: units that end or replace the running system
	`^systemd-(halt|poweroff|reboot|kexec|soft-reboot)\.service$`, `^initrd-`,
	`^(halt|poweroff|reboot|kexec)\.service$`,
}

// DefaultNeverRestart returns a fresh copy of the default never-restart
// patterns: needrestart's override_rc defaults plus strata's additions
// (see the package documentation). A unit whose ID, or a plan name that
// led to it, matches one is deferred to the next reboot. Callers extend the list with append.
func DefaultNeverRestart() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(defaultNeverRestart))
	for i, p := range defaultNeverRestart {
		out[i] = regexp.MustCompile(p)
	}
	return out
}

// defaultManagerFiles are the tree paths (path.Match patterns) of the
// service manager's own program and the libraries it loads on Debian,
// Fedora and Arch layouts, merged /usr or not.
var defaultManagerFiles = []string{
	"lib/systemd/systemd", "usr/lib/systemd/systemd",
	"sbin/init", "usr/sbin/init",
	"lib/systemd/libsystemd-core-*.so", "usr/lib/systemd/libsystemd-core-*.so",
	"lib/systemd/libsystemd-shared-*.so", "usr/lib/systemd/libsystemd-shared-*.so",
	"lib/*/systemd/libsystemd-core-*.so", "usr/lib/*/systemd/libsystemd-core-*.so",
	"lib/*/systemd/libsystemd-shared-*.so", "usr/lib/*/systemd/libsystemd-shared-*.so",
	"lib/*/libc.so.6", "usr/lib/*/libc.so.6", "lib64/libc.so.6", "usr/lib64/libc.so.6",
	"lib/*/ld-linux*.so.*", "usr/lib/*/ld-linux*.so.*", "lib64/ld-linux*.so.*", "usr/lib64/ld-linux*.so.*",
}

// DefaultManagerFiles returns a fresh copy of the patterns Resolve uses
// when Request.ManagerFiles is nil: systemd's program, its private
// libsystemd-core and libsystemd-shared, libc and the dynamic loader.
func DefaultManagerFiles() []string {
	return append([]string(nil), defaultManagerFiles...)
}

// managerChanged returns the changed paths that match a manager file
// pattern, sorted and unique.
func managerChanged(changed, patterns []string) []string {
	var hit []string
	for _, p := range changed {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, p); ok {
				hit = append(hit, p)
				break
			}
		}
	}
	return uniqueSorted(hit)
}

// neverRestart returns the first pattern matching one of names, and the
// name.
func neverRestart(names []string, patterns []*regexp.Regexp) (*regexp.Regexp, string) {
	for _, re := range patterns {
		for _, n := range names {
			if re.MatchString(n) {
				return re, n
			}
		}
	}
	return nil, ""
}

func uniqueSorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = append([]string(nil), s...)
	sort.Strings(s)
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}
