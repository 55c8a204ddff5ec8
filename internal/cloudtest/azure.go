package cloudtest

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/pugmark/pugfs/internal/testproc"
	"github.com/pugmark/pugfs/layout/drivers/azurefix"
)

// The account every Azurite serves, and its published development key
// (Azurite's README): not a secret.
const (
	AzureAccount = "devstoreaccount1"
	AzureKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzureServer is a running Azurite blob service with in-memory storage.
// Host is "127.0.0.1:PORT".
type AzureServer struct{ server }

var sharedAzure testproc.Shared[AzureServer]

// StartAzure starts an Azurite of its own for tb and stops it when tb
// ends. It fails tb if the emulator cannot be started.
func StartAzure(tb testing.TB) *AzureServer {
	tb.Helper()
	return startServer(tb, startAzure)
}

// SharedAzure returns the Azurite shared by every test of this test
// binary, starting it on first use. It fails tb (never skips it) if the
// emulator cannot be started. [Main] stops it.
func SharedAzure(tb testing.TB) *AzureServer {
	tb.Helper()
	s, err := sharedAzure.Get(startAzure)
	if err != nil {
		tb.Fatalf("cloudtest: shared azurite: %v", err)
	}
	return s
}

func startAzure() (*AzureServer, error) {
	bin, err := testproc.Tool("azurite-blob")
	if err != nil {
		return nil, err
	}
	s := &AzureServer{}
	if err := s.start(testproc.Server{Name: "azurite", Probe: probeAzure, Argv: func(port int, _ string) []string {
		return []string{bin, "--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port),
			"--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent"}
	}}); err != nil {
		return nil, err
	}
	return s, nil
}

// probeAzure lists containers with the account key: an answer proves the
// port is an Azurite that knows the development account.
func probeAzure(host string) error {
	cred, err := azblob.NewSharedKeyCredential(AzureAccount, AzureKey)
	if err != nil {
		return err
	}
	c, err := azblob.NewClientWithSharedKeyCredential(serviceURL(host), cred, &azblob.ClientOptions{
		ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = c.NewListContainersPager(nil).NextPage(ctx)
	return err
}

// ServiceURL is the blob service endpoint of the development account.
func (s *AzureServer) ServiceURL() string { return serviceURL(s.Host) }

func serviceURL(host string) string { return "http://" + host + "/" + AzureAccount + "/" }

// URL returns the gocloud URL of container on this server; a process
// opens it with [AzureServer.Env] in its environment.
func (s *AzureServer) URL(container string) string {
	return AzureURL(s.Host, container)
}

// AzureURL is the gocloud URL of container on the Azurite (or a proxy in
// front of one) at host.
func AzureURL(host, container string) string {
	q := url.Values{}
	q.Set("localemu", "true")
	q.Set("domain", host)
	q.Set("protocol", "http")
	return "azblob://" + container + "?" + q.Encode()
}

// Env returns what a process needs in its environment, besides the URL,
// to open containers on this emulator: the development account and key.
func (s *AzureServer) Env() []string {
	return []string{"AZURE_STORAGE_ACCOUNT=" + AzureAccount, "AZURE_STORAGE_KEY=" + AzureKey}
}

// CreateContainer creates an empty container called name.
func (s *AzureServer) CreateContainer(ctx context.Context, name string) error {
	c, err := containerClient(s.Host, name)
	if err != nil {
		return err
	}
	if _, err := c.Create(ctx, nil); err != nil {
		return fmt.Errorf("create container %q: %w\nemulator output:\n%s", name, err, s.Output())
	}
	return nil
}

// NewBucket creates a fresh, uniquely named, empty container and opens
// it; the handle is closed when tb ends. The URL is [AzureServer.URL]'s.
func (s *AzureServer) NewBucket(tb testing.TB) (*blob.Bucket, string) {
	tb.Helper()
	b, name := s.newBucket(tb, s.CreateContainer, s.OpenBucket)
	return b, s.URL(name)
}

// OpenBucket opens another handle, with its own client, on the existing
// container name, closed when tb ends.
func (s *AzureServer) OpenBucket(tb testing.TB, name string) *blob.Bucket {
	tb.Helper()
	b, err := OpenAzureBucket(context.Background(), s.Host, name)
	if err != nil {
		tb.Fatalf("cloudtest: open azure container %q: %v", name, err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// OpenAzureBucket opens container name on the Azurite reached at host (a
// proxy in front of one, say) through azureblob, with the development
// account's key, and wrapped as pugfs wraps every Azure bucket
// (layout/drivers/azurefix), so tests write through the path pugfs uses.
func OpenAzureBucket(ctx context.Context, host, name string) (*blob.Bucket, error) {
	c, err := containerClient(host, name)
	if err != nil {
		return nil, err
	}
	b, err := azureblob.OpenBucket(ctx, c, nil)
	if err != nil {
		return nil, err
	}
	return azurefix.Wrap(b), nil
}

func containerClient(host, name string) (*container.Client, error) {
	cred, err := azblob.NewSharedKeyCredential(AzureAccount, AzureKey)
	if err != nil {
		return nil, err
	}
	return container.NewClientWithSharedKeyCredential("http://"+host+"/"+AzureAccount+"/"+name, cred, nil)
}
