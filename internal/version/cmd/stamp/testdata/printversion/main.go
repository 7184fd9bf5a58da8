// Command printversion prints version.Get, for the test that links it
// with the stamp's -ldflags.
package main

import (
	"fmt"

	"github.com/gpulab/gpulab/internal/version"
)

func main() { fmt.Println(version.Get()) }
