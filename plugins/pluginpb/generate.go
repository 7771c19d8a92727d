// Package pluginpb is the generated gRPC code of hoard's plugin protocol
// (plugin.proto). The generated files are committed, so building hoard never
// needs protoc; regenerate after editing plugin.proto with
//
//	apt-get install -y protobuf-compiler protoc-gen-go protoc-gen-go-grpc
//	go generate ./plugins/pluginpb
package pluginpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative plugin.proto
