package nudge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ReadBody reads a nudge POSTed to a server (strata serve's relay, an
// agent): at most MaxSize bytes, within 10 seconds (a nudge is small; one
// that trickles in is dropped). On error it returns the status to answer:
// 413 for a body over MaxSize (said before reading when its length is
// declared), 400 for one that could not be read.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(10 * time.Second))
	tooLarge := fmt.Errorf("%w: a nudge is at most %d bytes", ErrRefused, MaxSize)
	if r.ContentLength > MaxSize {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxSize))
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: reading the nudge: %v", ErrRefused, err)
	}
	return body, 0, nil
}
