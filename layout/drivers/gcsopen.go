package drivers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/pugmark/pugfs/layout/deadlineblob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"
)

// gcsEmulatorEnv is the variable that points the GCS client at an
// emulator (fake-gcs-server), with authentication off.
const gcsEmulatorEnv = "STORAGE_EMULATOR_HOST"

// OpenGCS opens a gs:// URL as gocloud's gcsblob URL opener does (the
// same query parameters, Application Default Credentials, the emulator of
// STORAGE_EMULATOR_HOST), except that the HTTP client reports the
// progress of upload bodies to deadlineblob: a small object's body is
// sent in Close, and a mount's request timeout would otherwise cut off a
// large file on a slow link however steadily it went.
//
// What it leaves out of gocloud's opener: the defaults for signing URLs
// (an access ID and key read from the credentials, IAM signing on GCE),
// as pugfs signs none; and an anonymous URL (anonymous=true,
// access_id=-) gets gocloud's own client, without the progress report.
// Credentials that cannot be found are an error here, not a warning
// followed by a client whose every request fails.
func OpenGCS(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	anonymous, _ := strconv.ParseBool(q.Get("anonymous"))
	anonymous = anonymous || q.Get("access_id") == "-"
	grpc, _ := strconv.ParseBool(q.Get("grpc"))
	zonal, _ := strconv.ParseBool(q.Get("zonal"))
	emulated := os.Getenv(gcsEmulatorEnv) != ""

	var opts gcsblob.Options
	var creds *google.Credentials
	var err error
	switch universe := q.Get("universe_domain"); {
	case emulated || os.Getenv(gcsEmulatorEnv+"_GRPC") != "" || anonymous:
		// What gocloud's opener uses: the emulators take no
		// credentials, an anonymous client sends none.
		creds, err = google.CredentialsFromJSONWithType(ctx, []byte(`{"type": "service_account", "project_id": "my-project-id"}`), google.ServiceAccount)
	case universe != "":
		creds, err = gcp.DefaultCredentialsWithParams(ctx, google.CredentialsParams{UniverseDomain: universe})
	default:
		creds, err = gcp.DefaultCredentials(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: GCP credentials: %w", u.Host, err)
	}
	if !emulated && !anonymous {
		ud, err := creds.GetUniverseDomain()
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: GCP universe domain: %w", u.Host, err)
		}
		if ud != "" {
			opts.ClientOptions = append(opts.ClientOptions, option.WithUniverseDomain(ud))
		}
	}
	client, err := gcp.NewHTTPClient(deadlineblob.Transport(gcp.DefaultTransport()), creds.TokenSource)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Host, err)
	}
	if emulated && !grpc && !zonal {
		// gcsblob talks to the emulator through http.DefaultClient,
		// not the client above; a client option given later wins.
		opts.ClientOptions = append(opts.ClientOptions, option.WithHTTPClient(&http.Client{Transport: deadlineblob.Transport(http.DefaultTransport)}))
	}
	o := &gcsblob.URLOpener{Client: client, TokenSource: gcp.CredentialsTokenSource(creds), Options: opts}
	b, err := o.OpenBucketURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return Adapt(b), nil
}
