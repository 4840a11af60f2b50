// Package proto holds Sluice's protobuf definitions; the generated Go code
// lives in sub-packages (storagepb, ...) and is committed, so building Sluice
// needs no protoc. Regenerate with `go generate ./proto/` (needs protoc from
// the protobuf-compiler package; protoc-gen-go is pinned in go.mod).
package proto

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=module=github.com/sluicefs/sluice/proto storage/v1/storage.proto meta/v1/meta.proto"
