package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/strata-dev/strata/internal/sign"
)

// HealthSignatureHeader carries the signature of a /health answer: the
// base64 of a minisign signature of the body by the node's identity key,
// with the trusted comment HealthComment.
const HealthSignatureHeader = "Strata-Signature"

// HealthComment is the trusted comment of a health signature.
const HealthComment = "strata health"

// ErrUnsigned reports a health answer not signed by the node's pinned
// identity key, or not for this request: someone else answered.
var ErrUnsigned = errors.New("health not signed by the node's identity key")

// SignHealth returns the value of HealthSignatureHeader for body, signed
// with the node's identity key.
func SignHealth(key *sign.Key, body []byte) string {
	return base64.StdEncoding.EncodeToString(key.Sign(body, HealthComment))
}

// CheckHealth verifies that body, a health answer, was signed (sig, the
// HealthSignatureHeader value) by identity (a minisign public key) and
// carries nonce, the one the caller sent: an answer another key signed,
// or one signed for another request (a replay), is ErrUnsigned.
func CheckHealth(body []byte, sig, identity, nonce string) error {
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || sig == "" {
		return fmt.Errorf("%w: no signature", ErrUnsigned)
	}
	ks, err := sign.NewKeySet([]byte(identity))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsigned, err)
	}
	if _, err := ks.VerifyFor(body, raw, HealthComment); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsigned, err)
	}
	var doc struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Nonce != nonce {
		return fmt.Errorf("%w: signed, but for another request (nonce %q, sent %q): a replay", ErrUnsigned, doc.Nonce, nonce)
	}
	return nil
}
