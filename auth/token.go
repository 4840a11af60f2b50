package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// FabricSecret is the fabric secret derived from the cluster token: every
// process that holds the token can join the data plane.
func FabricSecret(token string) []byte {
	s := sha256.Sum256([]byte("sluice fabric " + token))
	return s[:]
}

// LoadToken reads the cluster token at path, making one the first time.
func LoadToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); len(t) >= 16 {
			return t, nil
		}
		return "", fmt.Errorf("auth: token file %s holds no usable token (16+ characters)", path)
	}
	var b [24]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("auth: write token: %w", err)
	}
	return token, nil
}
