package drivers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/drivers/azurefix"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
)

// OpenAzure opens an azblob:// URL as gocloud's azureblob URL opener does
// (the same query parameters, and credentials from the same environment:
// AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN,
// AZURE_STORAGE_CONNECTION_STRING, else the default Azure credential),
// except that the HTTP client reports the progress of upload bodies to
// deadlineblob: a block is staged in one request while a Write or the
// Close waits, and a mount's request timeout would otherwise cut off a
// large file on a slow link however steadily it went.
//
// gocloud's opener lets a URL with a SAS token from the environment name
// another endpoint of the same origin; this one refuses any URL that
// names an endpoint then (domain, protocol, cdn, localemu,
// storage_account), so the token still goes nowhere else.
//
// The bucket writes through azurefix, around gocloud's crash on a failed
// conditional write.
func OpenAzure(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	svc := azureblob.NewDefaultServiceURLOptions()
	if svc.SASToken != "" {
		for _, k := range []string{"domain", "protocol", "cdn", "localemu", "storage_account"} {
			if u.Query().Has(k) {
				return nil, fmt.Errorf("open bucket %s: a URL cannot choose the endpoint (%s) when AZURE_STORAGE_SAS_TOKEN is set", u.Host, k)
			}
		}
	}
	o := &azureblob.URLOpener{MakeClient: azureClient, ServiceURLOptions: *svc}
	b, err := o.OpenBucketURL(ctx, u)
	if err != nil {
		return nil, err
	}
	// gocloud's azureblob panics on a failed conditional write (see
	// azurefix); every Azure bucket pugfs opens writes around it.
	return azurefix.Wrap(b), nil
}

// azureClient is gocloud's azureblob.NewDefaultClient with the HTTP client
// of azureTransport.
func azureClient(svcURL azureblob.ServiceURL, name azureblob.ContainerName) (*container.Client, error) {
	opts := &container.ClientOptions{}
	opts.Transport = &http.Client{Transport: deadlineblob.Transport(azureTransport())}
	containerURL, err := url.JoinPath(string(svcURL), string(name))
	if err != nil {
		return nil, err
	}
	account, key := os.Getenv("AZURE_STORAGE_ACCOUNT"), os.Getenv("AZURE_STORAGE_KEY")
	connStr := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if connStr == "" {
		connStr = os.Getenv("AZURE_STORAGEBLOB_CONNECTIONSTRING")
	}
	switch {
	case account != "" && key != "":
		cred, err := azblob.NewSharedKeyCredential(account, key)
		if err != nil {
			return nil, fmt.Errorf("azure shared key: %w", err)
		}
		return container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
	case os.Getenv("AZURE_STORAGE_SAS_TOKEN") != "":
		// The token is in svcURL (NewServiceURL appends it).
		return container.NewClientWithNoCredential(containerURL, opts)
	case connStr != "":
		return container.NewClientFromConnectionString(connStr, string(name), opts)
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("azure default credential: %w", err)
	}
	return container.NewClient(containerURL, cred, opts)
}

// azureTransport is the Azure SDK's default transport (azcore's
// defaultHTTPClient), which a client given a transport of its own no
// longer gets: TLS 1.2 at least, renegotiation allowed, and a ping of an
// HTTP/2 connection idle for 10 s.
func azureTransport() *http.Transport {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	t = t.Clone()
	t.ForceAttemptHTTP2 = true
	t.MaxIdleConns = 100
	t.MaxIdleConnsPerHost = 10
	t.IdleConnTimeout = 90 * time.Second
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ExpectContinueTimeout = time.Second
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, Renegotiation: tls.RenegotiateFreelyAsClient}
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second}
	// Bodies as stored: asked for none, Go's transport requests gzip
	// itself on a GET without a Range and decodes a body stored with
	// Content-Encoding: gzip, whose bytes then fail their digest (a
	// whole read of an encoded blob was EIO, and fsck called a healthy
	// bucket rotten).
	t.DisableCompression = true
	return t
}
