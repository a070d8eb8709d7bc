package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingTimeout bounds the first PING: a Redis that accepts connections and
// never answers is one clear line after it.
const pingTimeout = 5 * time.Second

// Environment variables that stand in for connection flags. They are read
// only when the connection is opened, so that --help and usage errors never
// show them.
const (
	envCACert       = "REDISLEADER_CACERT"
	envCert         = "REDISLEADER_CERT"
	envKey          = "REDISLEADER_KEY"
	envInsecure     = "REDISLEADER_INSECURE"
	envPasswordFile = "REDISLEADER_PASSWORD_FILE"
	envAuth         = "REDISCLI_AUTH" // redis-cli's name for the password
)

// urlList is a repeatable --redis flag.
type urlList []string

func (l *urlList) String() string     { return "" } // never print a URL as a default
func (l *urlList) Set(s string) error { *l = append(*l, s); return nil }

// connFlags are the flags that say which Redis to use and how, shared by
// run, status and watch.
type connFlags struct {
	urls           urlList
	cacert         string
	cert           string
	key            string
	insecure       bool
	passwordFile   string
	sentinelMaster string
	cluster        bool
}

// register adds the connection flags to fs.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.urls, "redis", "Redis `URL`: "+redisURLForms+";\npercent-encode special characters in the password (default: $REDIS_URL, else "+defaultRedisURL+").\nRepeat it to give several Sentinels (--sentinel-master) or cluster seeds (--cluster)")
	fs.StringVar(&c.cacert, "cacert", "", "`file` of PEM CA certificates to verify the server with (rediss:// only; default: $"+envCACert+", else the system's)")
	fs.StringVar(&c.cert, "cert", "", "client certificate `file` (PEM) for servers that ask for one (default: $"+envCert+")")
	fs.StringVar(&c.key, "key", "", "`file` of the client certificate's private key (PEM) (default: $"+envKey+")")
	fs.BoolVar(&c.insecure, "insecure", false, "do not verify the server's certificate (default: $"+envInsecure+"=1)")
	fs.StringVar(&c.passwordFile, "password-file", "", "read the Redis password from `file` (its first line) instead of the URL (default: $"+envPasswordFile+"; else $"+envAuth+" holds the password itself)")
	fs.StringVar(&c.sentinelMaster, "sentinel-master", "", "ask the Sentinels given by --redis for the primary of the master `name`")
	fs.BoolVar(&c.cluster, "cluster", false, "Redis Cluster: --redis gives one or more seed nodes")
}

// endpoint is where and how the commands connect: the parsed --redis URLs
// (one for a single Redis; the Sentinels or the seeds otherwise) and what
// the other connection flags add. Nothing of it is printed but shown and
// what hide lets through.
type endpoint struct {
	targets        []*redisTarget
	sentinelMaster string
	cluster        bool
	password       string // from --password-file or REDISCLI_AUTH; "" for the URL's
	tls            *tls.Config
}

// hide removes every URL and password of e from s.
func (e *endpoint) hide(s string) string {
	for _, t := range e.targets {
		s = t.hide(s)
	}
	if e.password != "" {
		s = strings.ReplaceAll(s, e.password, hidden)
	}
	return s
}

// shown says where e connects, redacted.
func (e *endpoint) shown() string {
	addrs := make([]string, len(e.targets))
	for i, t := range e.targets {
		addrs[i] = t.shown
	}
	switch {
	case e.sentinelMaster != "":
		return fmt.Sprintf("master %s via Sentinel %s", printable(e.sentinelMaster), strings.Join(addrs, ", "))
	case e.cluster:
		return "cluster " + strings.Join(addrs, ", ")
	}
	return addrs[0]
}

// open parses the connection flags and the environment. On a usage
// error it says why on one line (with any URL redacted) and returns
// exitUsage; otherwise a logger to stderr that hides the URLs and passwords.
func (c *connFlags) open(cmd string, stderr io.Writer) (*logger, *endpoint, int) {
	fail := func(format string, a ...any) (*logger, *endpoint, int) {
		return nil, nil, usageError(stderr, cmd, format, a...)
	}
	e := &endpoint{sentinelMaster: c.sentinelMaster, cluster: c.cluster}
	urls, source := c.urls, "--redis URL"
	if len(urls) == 0 {
		var raw string
		raw, source = redisURLFrom()
		urls = []string{raw}
	}
	for _, raw := range urls {
		t, err := parseRedisURL(raw, source)
		if err != nil {
			fmt.Fprintf(stderr, "redisleader: %v\n", err)
			return nil, nil, exitUsage
		}
		e.targets = append(e.targets, t)
	}
	switch {
	case c.sentinelMaster != "" && c.cluster:
		return fail("--sentinel-master and --cluster exclude each other")
	case len(e.targets) > 1 && c.sentinelMaster == "" && !c.cluster:
		return fail("several --redis URLs need --sentinel-master or --cluster")
	}
	first := e.targets[0]
	for _, t := range e.targets[1:] {
		if (t.opt.TLSConfig != nil) != (first.opt.TLSConfig != nil) || t.opt.Network != first.opt.Network {
			return fail("the --redis URLs must all be redis:// or all rediss://")
		}
	}

	pwFile := firstNonEmpty(c.passwordFile, os.Getenv(envPasswordFile))
	switch {
	case pwFile != "":
		data, err := os.ReadFile(pwFile)
		if err != nil {
			return fail("--password-file: %v", err)
		}
		line, _, _ := strings.Cut(string(data), "\n")
		e.password = strings.TrimSuffix(line, "\r")
		if e.password == "" {
			return fail("--password-file %s: empty first line", pwFile)
		}
	case first.opt.Password == "":
		e.password = os.Getenv(envAuth)
	}
	if pwFile != "" && first.opt.Password != "" {
		return fail("the password is both in the URL and in --password-file: give it once")
	}

	tlsConf, err := c.tlsConfig(first)
	if err != nil {
		return fail("%v", err)
	}
	e.tls = tlsConf
	return &logger{w: stderr, target: e}, e, -1
}

// tlsConfig applies --cacert, --cert, --key and --insecure (or their
// environment variables) to the TLS configuration of a rediss:// URL.
func (c *connFlags) tlsConfig(first *redisTarget) (*tls.Config, error) {
	cacert := firstNonEmpty(c.cacert, os.Getenv(envCACert))
	cert := firstNonEmpty(c.cert, os.Getenv(envCert))
	key := firstNonEmpty(c.key, os.Getenv(envKey))
	insecure := c.insecure
	if v := os.Getenv(envInsecure); !insecure && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("invalid $%s %q: want 1 or 0", envInsecure, printable(v))
		}
		insecure = b
	}
	base := first.opt.TLSConfig
	if base == nil {
		if cacert != "" || cert != "" || key != "" || insecure {
			return nil, errors.New("--cacert, --cert, --key and --insecure need a rediss:// URL")
		}
		return nil, nil
	}
	conf := base.Clone()
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", cacert)
		}
		conf.RootCAs = pool
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %v", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return nil, errors.New("--cert and --key go together")
	}
	if insecure {
		conf.InsecureSkipVerify = true
	}
	return conf, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// client makes the go-redis client for e with the options this library
// recommends: a *redis.Client for one Redis or a Sentinel-managed primary,
// a *redis.ClusterClient for a cluster.
func (e *endpoint) client() redis.UniversalClient {
	opt := *e.targets[0].opt
	opt.ContextTimeoutEnabled = true
	// go-redis's default read timeout (3s) would end the first PING before
	// pingTimeout, and "no reply within 5s" would be said after 3s.
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = pingTimeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = opt.ReadTimeout
	}
	if e.password != "" {
		opt.Password = e.password
	}
	if e.tls != nil {
		opt.TLSConfig = e.tls
	}
	addrs := make([]string, len(e.targets))
	for i, t := range e.targets {
		addrs[i] = t.opt.Addr
	}
	if (e.sentinelMaster != "" || e.cluster) && opt.TLSConfig != nil {
		// Each node is verified against its own address, not the first
		// URL's host (crypto/tls takes the name from the address dialled).
		opt.TLSConfig = opt.TLSConfig.Clone()
		opt.TLSConfig.ServerName = ""
	}
	switch {
	case e.sentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            e.sentinelMaster,
			SentinelAddrs:         addrs,
			Username:              opt.Username,
			Password:              opt.Password,
			SentinelUsername:      opt.Username, // the README: they apply to every node
			SentinelPassword:      opt.Password,
			DB:                    opt.DB,
			ReadTimeout:           opt.ReadTimeout,
			WriteTimeout:          opt.WriteTimeout,
			TLSConfig:             opt.TLSConfig,
			ContextTimeoutEnabled: true,
		})
	case e.cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 addrs,
			Username:              opt.Username,
			Password:              opt.Password,
			TLSConfig:             opt.TLSConfig,
			ReadTimeout:           opt.ReadTimeout,
			WriteTimeout:          opt.WriteTimeout,
			ContextTimeoutEnabled: true,
		})
	}
	return redis.NewClient(&opt)
}

// connect makes a client for e and checks that Redis answers, so that a
// wrong address is one clear line instead of endless retries.
func connect(ctx context.Context, e *endpoint) (redis.UniversalClient, error) {
	return connectWithin(ctx, e, 0)
}

// connectWithin is connect with the wait for the first reply also bounded
// by limit, if positive (run --wait).
func connectWithin(ctx context.Context, e *endpoint, limit time.Duration) (redis.UniversalClient, error) {
	c := e.client()
	wait := e.replyWait(limit)
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		if ctx.Err() == nil && (pctx.Err() != nil || isTimeout(err)) { // pctx: the Sentinel client flattens it too
			return nil, fmt.Errorf("no reply from Redis at %s within %v", e.shown(), wait)
		}
		if rerr := redis.Error(nil); errors.As(err, &rerr) { // Redis answered: reachable, but it said no
			return nil, fmt.Errorf("rejected by Redis at %s: %w%s", e.shown(), err, aclHint(err))
		}
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", e.shown(), err)
	}
	return c, nil
}

// aclHint is what to add to a refusal err of the connection's set-up
// commands: where to read which commands a user needs, for an ACL denial
// (a database other than 0 needs SELECT, which the least-privilege rule
// does not have).
func aclHint(err error) string {
	if redis.HasErrorPrefix(err, "NOPERM") {
		return " (the user's ACL rule lacks a command: see docs/operations.md, ACL)"
	}
	return ""
}

// replyWait is how long connect waits for the first reply: pingTimeout, or
// less if the URL sets a shorter read_timeout or limit (if positive) is
// shorter.
func (e *endpoint) replyWait(limit time.Duration) time.Duration {
	wait := pingTimeout
	if rt := e.targets[0].opt.ReadTimeout; rt > 0 && rt < wait {
		wait = rt
	}
	if limit > 0 && limit < wait {
		wait = limit
	}
	return wait
}

// isTimeout reports whether err says that Redis did not answer in time. The
// Sentinel client reports it in a plain error ("redis: all sentinels
// specified in configuration are unreachable: i/o timeout"), hence the
// message test.
func isTimeout(err error) bool {
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &nerr) && nerr.Timeout() ||
		strings.HasSuffix(err.Error(), "i/o timeout")
}
