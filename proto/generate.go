// Package proto holds Sluice's protobuf definitions; the generated Go code
// lives in sub-packages (storagepb, metapb, mgmtdpb) and is committed, so
// building Sluice needs no protoc. Regenerate with `go generate ./proto/`
// (needs protoc from the protobuf-compiler package; the plugins are Go tools
// pinned in go.mod). The REST gateway's HTTP rules live in YAML beside the
// service (grpc_api_configuration), and the OpenAPI file is generated from
// them. The gateway is generated without a package comment
// (omit_package_doc): each sub-package's doc.go is its own.
package proto

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=module=github.com/sluicefs/sluice/proto storage/v1/storage.proto mgmtd/v1/mgmtd.proto mgmtd/v1/service.proto meta/v1/meta.proto meta/v1/service.proto"
//go:generate sh -c "protoc --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go-grpc_out=. --go-grpc_opt=module=github.com/sluicefs/sluice/proto meta/v1/service.proto mgmtd/v1/service.proto"
//go:generate sh -c "protoc --plugin=protoc-gen-grpc-gateway=$(go tool -n protoc-gen-grpc-gateway) --grpc-gateway_out=. --grpc-gateway_opt=module=github.com/sluicefs/sluice/proto --grpc-gateway_opt=omit_package_doc=true --grpc-gateway_opt=grpc_api_configuration=meta/v1/meta_http.yaml meta/v1/service.proto"
//go:generate sh -c "protoc --plugin=protoc-gen-grpc-gateway=$(go tool -n protoc-gen-grpc-gateway) --grpc-gateway_out=. --grpc-gateway_opt=module=github.com/sluicefs/sluice/proto --grpc-gateway_opt=omit_package_doc=true --grpc-gateway_opt=grpc_api_configuration=mgmtd/v1/mgmtd_http.yaml mgmtd/v1/service.proto"
//go:generate sh -c "protoc --plugin=protoc-gen-openapiv2=$(go tool -n protoc-gen-openapiv2) --openapiv2_out=openapi --openapiv2_opt=grpc_api_configuration=meta/v1/meta_http.yaml meta/v1/service.proto"
//go:generate sh -c "protoc --plugin=protoc-gen-openapiv2=$(go tool -n protoc-gen-openapiv2) --openapiv2_out=openapi --openapiv2_opt=grpc_api_configuration=mgmtd/v1/mgmtd_http.yaml mgmtd/v1/service.proto"
