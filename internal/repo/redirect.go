package repo

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
)

// maxRedirects bounds the redirects one request follows.
const maxRedirects = 5

// ErrRedirect reports a redirect strata does not follow.
var ErrRedirect = errors.New("repository: redirect refused")

// checkRedirect is the HTTP client's redirect policy: at most
// maxRedirects, never from https to http, and never to a loopback or
// private address (an IP literal or localhost) when the request did not
// start at one: a server must not steer a node to its own services. Link-
// local addresses (cloud metadata services live there) are refused for
// every connection, by dialControl.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", ErrRedirect, maxRedirects)
	}
	first := via[0].URL
	if first.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("%w: from %s to %s drops TLS", ErrRedirect, first.Redacted(), req.URL.Redacted())
	}
	if internal(req.URL.Hostname()) && !internal(first.Hostname()) {
		return fmt.Errorf("%w: from %s to %s, a loopback or private address", ErrRedirect, first.Redacted(), req.URL.Redacted())
	}
	return nil
}

// internal reports a host named as loopback, private or unspecified.
func internal(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsLinkLocalUnicast()
}

// dialControl refuses connections to link-local addresses (169.254.0.0/16,
// fe80::/10, where cloud metadata services answer), whatever name led
// there: no repository is served from one.
func dialControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if a, err := netip.ParseAddr(host); err == nil && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) {
		return fmt.Errorf("%w: %s is a link-local address", ErrRedirect, address)
	}
	return nil
}
