package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
)

//go:embed meta/v1/service.swagger.json
var metaDoc []byte

//go:embed mgmtd/v1/service.swagger.json
var mgmtdDoc []byte

// undescribed is a schema without its top description: two messages of the
// same shape and name whose comments differ are one definition.
func undescribed(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	c := make(map[string]any, len(m))
	for k, x := range m {
		if k != "description" {
			c[k] = x
		}
	}
	return c
}

// Document is the REST API's OpenAPI document: the meta service's with the
// mgmtd service's tags, paths and definitions added (where both define a
// message the meta document's description stays), titled for Sluice.
func Document() ([]byte, error) {
	var out map[string]any
	if err := json.Unmarshal(metaDoc, &out); err != nil {
		return nil, fmt.Errorf("openapi: meta document: %w", err)
	}
	var add map[string]any
	if err := json.Unmarshal(mgmtdDoc, &add); err != nil {
		return nil, fmt.Errorf("openapi: mgmtd document: %w", err)
	}
	for _, key := range []string{"paths", "definitions"} {
		dst, _ := out[key].(map[string]any)
		if dst == nil {
			dst = map[string]any{}
			out[key] = dst
		}
		src, _ := add[key].(map[string]any)
		for k, v := range src {
			if have, ok := dst[k]; ok && !reflect.DeepEqual(undescribed(have), undescribed(v)) {
				return nil, fmt.Errorf("openapi: %s %q differs between the meta and mgmtd documents", key, k)
			}
			dst[k] = v
		}
	}
	tags, _ := out["tags"].([]any)
	addTags, _ := add["tags"].([]any)
	out["tags"] = append(tags, addTags...)
	out["info"] = map[string]any{"title": "Sluice REST API (meta and mgmtd)", "version": "v1"}
	return json.MarshalIndent(out, "", "  ")
}
