package fs

import (
	"testing"

	"github.com/pugmark/pugfs/internal/testbucket"
)

// The mount tests run on every backend (mem, the local driver, a real S3
// server); testbucket.Main stops the shared S3 server at the end.
func TestMain(m *testing.M) { testbucket.Main(m) }
