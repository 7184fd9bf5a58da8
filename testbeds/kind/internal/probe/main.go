// Command probe is the tiny workload the kind testbed's tests run in pods
// (an image built here, FROM scratch): `probe serve ADDR` prints the GPUs
// the kubelet gave it (NVIDIA_VISIBLE_DEVICES, and the /dev/nvidia<N>
// device nodes CDI gave it) and answers every request
// with the pod's name; `probe get URL` fetches URL, prints the body
// and fails unless the answer is 200, retrying until a deadline so that a
// pod started before its peer is Ready still proves the path.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: probe serve ADDR | probe get URL")
	}
	switch args[0] {
	case "serve":
		host, _ := os.Hostname()
		fmt.Printf("NVIDIA_VISIBLE_DEVICES=%s\n", os.Getenv("NVIDIA_VISIBLE_DEVICES"))
		nodes, err := filepath.Glob("/dev/nvidia[0-9]*")
		if err != nil {
			return err
		}
		fmt.Printf("GPU_DEVICE_NODES=%s\n", strings.Join(nodes, ","))
		srv := &http.Server{Addr: args[1], ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", host)
		})}
		return srv.ListenAndServe()
	case "get":
		return get(args[1], 2*time.Minute)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func get(url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Print(string(body))
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s within %s: %w", url, within, last)
		case <-time.After(time.Second):
		}
	}
}
