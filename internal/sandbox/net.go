package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// LoopbackUp brings up lo in the calling thread's network namespace (a
// new one has lo down, and 127.0.0.1 with it).
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: reading flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	return nil
}

// ownNetwork readies the sandbox's own, empty network namespace for a
// validation that binds its listening sockets (nginx -t does): lo up, and
// every port bindable without a capability (nothing else can reach this
// namespace, so no port here is worth protecting).
func ownNetwork() error {
	if err := LoopbackUp(); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0\n"), 0); err != nil {
		return fmt.Errorf("opening low ports in the sandbox's network namespace: %w", err)
	}
	return nil
}
