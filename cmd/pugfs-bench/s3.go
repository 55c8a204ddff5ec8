package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// Credentials and region of the versitygw the harness runs.
const (
	s3Access = "pugfs-bench-access"
	s3Secret = "pugfs-bench-secret-key"
	s3Region = "us-east-1"
)

// s3Server is a versitygw process with its posix backend serving root
// (each subdirectory a bucket). root is kept across runs, so the S3 copies
// of the data sets are generated once.
type s3Server struct {
	root     string
	endpoint string
	proc     *process
}

// startS3 starts versitygw on a free loopback port and waits (bounded)
// until it answers signed requests.
func startS3(ctx context.Context, bin, root string) (*s3Server, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := l.Addr().String()
		l.Close()
		cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", root)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s3Access, "ROOT_SECRET_KEY="+s3Secret, "VGW_REGION="+s3Region)
		p, err := startProcess(cmd)
		if err != nil {
			return nil, err
		}
		s := &s3Server{root: root, endpoint: "http://" + addr, proc: p}
		if lastErr = s.waitReady(ctx); lastErr == nil {
			return s, nil
		}
		s.stop()
		if !strings.Contains(p.out.String(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("versitygw: %w", lastErr)
}

func (s *s3Server) client(retry bool) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.endpoint),
		Region:       s3Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s3Access, s3Secret, ""),
	}, func(o *s3.Options) {
		if !retry {
			o.Retryer = aws.NopRetryer{}
		}
	})
}

func (s *s3Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := s.client(false)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.ListBuckets(actx, &s3.ListBucketsInput{})
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.proc.done:
			return fmt.Errorf("exited before answering (%v): %s", s.proc.err, tail([]byte(s.proc.out.String()), 400))
		case <-ctx.Done():
			return fmt.Errorf("not answering after 30s: %v", err)
		case <-time.After(delay):
		}
	}
}

// recreateBucket removes what a half-finished generation left and creates
// the bucket afresh.
func (s *s3Server) recreateBucket(ctx context.Context, name string) error {
	if err := os.RemoveAll(filepath.Join(s.root, name)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := s.client(true).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		return fmt.Errorf("create S3 bucket %s: %w", name, err)
	}
	return nil
}

func (s *s3Server) openBucket(ctx context.Context, name string) (*blob.Bucket, error) {
	return s3blob.OpenBucket(ctx, s.client(true), name, nil)
}

// url is the gocloud URL of bucket name; opening it needs env().
func (s *s3Server) url(name string) string {
	q := url.Values{}
	q.Set("endpoint", s.endpoint)
	q.Set("use_path_style", "true")
	q.Set("disable_https", "true")
	q.Set("region", s3Region)
	return "s3://" + name + "?" + q.Encode()
}

// env is what a pugfs process needs to open url(): static credentials,
// and nothing that sends the SDK looking for others.
func (s *s3Server) env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s3Access,
		"AWS_SECRET_ACCESS_KEY=" + s3Secret,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + s3Region,
		"AWS_PROFILE=",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

func (s *s3Server) stop() {
	if s == nil || s.proc == nil {
		return
	}
	s.proc.kill()
}
