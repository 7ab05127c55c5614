// Command fakegrpcurl is the part of grpcurl that the README's examples use,
// so that integration/cli_docs_test.go can run those examples as written
// without building grpcurl (a separate module with its own dependency
// versions): `grpcurl -plaintext ADDRESS list` lists the services through
// server reflection, and `grpcurl -plaintext -d JSON ADDRESS sink.v1.Sink/METHOD`
// decodes the request from the API's JSON form (protojson, as grpcurl does;
// unknown fields are errors), calls the method and prints the response as
// grpcurl does (indented protojson, lowerCamelCase names, no default
// values). An RPC error exits with 64 + the gRPC code, as grpcurl does.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("grpcurl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	plaintext := fs.Bool("plaintext", false, "use plain-text HTTP/2 (no TLS)")
	data := fs.String("d", "", "request data (JSON)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !*plaintext {
		fmt.Fprintln(stderr, "fakegrpcurl: only -plaintext connections are supported")
		return 2
	}
	if fs.NArg() != 2 {
		// As grpcurl: extra words (say, a wrapped base64 outside quotes) are an error.
		if fs.NArg() > 2 {
			fmt.Fprintln(stderr, "Too many arguments.")
		} else {
			fmt.Fprintln(stderr, "Too few arguments.")
		}
		return 2
	}
	conn, err := grpc.NewClient(fs.Arg(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(stderr, "Failed to dial target host %q: %v\n", fs.Arg(0), err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if fs.Arg(1) == "list" {
		return list(ctx, conn, stdout, stderr)
	}
	var req, resp proto.Message
	switch fs.Arg(1) {
	case "sink.v1.Sink/Read":
		req, resp = &sinkv1.ReadRequest{}, &sinkv1.ReadResponse{}
	case "sink.v1.Sink/Write":
		req, resp = &sinkv1.WriteRequest{}, &sinkv1.WriteResponse{}
	case "sink.v1.Sink/Delete":
		req, resp = &sinkv1.DeleteRequest{}, &sinkv1.DeleteResponse{}
	default:
		fmt.Fprintf(stderr, "fakegrpcurl: unsupported method %q\n", fs.Arg(1))
		return 2
	}
	if err := protojson.Unmarshal([]byte(*data), req); err != nil {
		fmt.Fprintf(stderr, "Error invoking method %q: error getting request data: %v\n", fs.Arg(1), err)
		return 1
	}
	if err := conn.Invoke(ctx, "/"+fs.Arg(1), req, resp); err != nil {
		st := status.Convert(err)
		fmt.Fprintf(stderr, "ERROR:\n  Code: %s\n  Message: %s\n", st.Code(), st.Message())
		return 64 + int(st.Code())
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
	if err != nil {
		fmt.Fprintf(stderr, "fakegrpcurl: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return 0
}

// list prints the services the server lists through reflection, sorted.
func list(ctx context.Context, conn *grpc.ClientConn, stdout, stderr io.Writer) int {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "Failed to list services: %v\n", err)
		return 1
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		fmt.Fprintf(stderr, "Failed to list services: %v\n", err)
		return 1
	}
	r, err := stream.Recv()
	if err != nil {
		fmt.Fprintf(stderr, "Failed to list services: %v\n", err)
		return 1
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if len(names) == 0 {
		fmt.Fprintf(stderr, "Failed to list services: %v\n", r.GetErrorResponse())
		return 1
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(stdout, n)
	}
	return 0
}
