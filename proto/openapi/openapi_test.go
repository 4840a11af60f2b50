package openapi

import (
	"encoding/json"
	"testing"
)

// TestDocument: the merged document has both services' paths.
func TestDocument(t *testing.T) {
	b, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Swagger string                    `json:"swagger"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/cluster/status", "/v1/cluster/map", "/v1/statfs"} {
		if doc.Paths[p] == nil {
			t.Errorf("no path %s in the document", p)
		}
	}
	if doc.Swagger != "2.0" {
		t.Errorf("swagger %q, want 2.0", doc.Swagger)
	}
}
