// go-leaderelection: a fencecheck lock client (docs/client-protocol.md, version 1)
// around client-go's tools/leaderelection (a LeaderElector on a LeaseLock), as a Go
// controller uses it. stdin/stdout carry the protocol, one JSON object per line;
// everything else (ours, klog's) goes to stderr, which the worker keeps as this
// client's log.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"sync"
	"time"
)

// library is what the hello says: setup.sh stamps the client-go release of the tree it
// builds against (-ldflags -X main.library=...); client-go's own version package is
// only stamped by Kubernetes' release build.
var library = "client-go tools/leaderelection (unknown release)"

// request is a worker → client line. Unknown fields are ignored, as the
// protocol asks.
type request struct {
	ID        int64    `json:"id"`
	Op        string   `json:"op"`
	Service   string   `json:"service"`
	Endpoints []string `json:"endpoints"`
	TTLms     int64    `json:"ttl_ms"`
	Lock      string   `json:"lock"`
	// open, for service "kubernetes" (docs/client-protocol.md): the apiserver's bearer
	// token, the PEM text of the CA that signed its serving certificate, the name that
	// certificate is for (not the proxy's address), and the elector's timing.
	BearerToken     string `json:"bearer_token"`
	CAPem           string `json:"ca_pem"`
	TLSServerName   string `json:"tls_server_name"`
	RenewDeadlineMs int64  `json:"renew_deadline_ms"`
	RetryPeriodMs   int64  `json:"retry_period_ms"`
	// acquire: the identity the elector must write as the Lease's holderIdentity (the
	// harness reads worker, pid and session off it).
	Owner string `json:"owner"`
}

// out writes protocol lines. The elector's OnStoppedLeading sends session-lost from
// its own goroutine, so writes are serialised: two lines must never interleave.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) send(v map[string]interface{}) {
	line, err := json.Marshal(v)
	if err != nil {
		// Only our own maps reach here; a failure is a bug, not input.
		log.Fatalf("cannot encode %v: %v", v, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(line)
	o.w.WriteByte('\n')
	if err := o.w.Flush(); err != nil {
		// The worker is gone: nobody is left to answer.
		log.Fatalf("stdout: %v", err)
	}
}

func (o *out) answer(id int64, fields map[string]interface{}, err error) {
	v := map[string]interface{}{"id": id}
	if err != nil {
		v["ok"] = false
		v["error"] = err.Error()
	} else {
		v["ok"] = true
		for k, f := range fields {
			v[k] = f
		}
	}
	o.send(v)
}

// options is how the controller around the elector is written, from the command line
// (a scenario's `[client] command`):
//
//	-release-on-cancel=BOOL  LeaderElectionConfig.ReleaseOnCancel (default true): a
//	                         cancelled elector clears the Lease's holder before Run returns.
//	-step-down-after=DUR     cancel the elector's context DUR after it starts leading,
//	                         while the worker's hold may still run (default 0: never; the
//	                         context is cancelled only by release, after the hold's work).
type options struct {
	releaseOnCancel bool
	stepDownAfter   time.Duration
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("go-leaderelection", flag.ContinueOnError)
	fs.BoolVar(&o.releaseOnCancel, "release-on-cancel", true, "LeaderElectionConfig.ReleaseOnCancel")
	fs.DurationVar(&o.stepDownAfter, "step-down-after", 0, "cancel the elector's context this long after it starts leading (0: never)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.stepDownAfter < 0 {
		return o, fmt.Errorf("-step-down-after %s: negative", o.stepDownAfter)
	}
	return o, nil
}

func main() {
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("go-leaderelection[%s] ", os.Getenv("FENCECHECK_WORKER")))

	opts, err := parseOptions(os.Args[1:])
	if err != nil {
		// Before the hello: the worker quotes our last words and gives up on us.
		log.Fatalf("bad command line: %v", err)
	}
	o := &out{w: bufio.NewWriter(os.Stdout)}
	o.send(map[string]interface{}{
		"fencecheck_client": 1,
		"library": fmt.Sprintf("%s (%s; ReleaseOnCancel %v, step down after %s)",
			library, runtime.Version(), opts.releaseOnCancel, opts.stepDownAfter),
	})
	log.Printf("ReleaseOnCancel %v, step down after %s", opts.releaseOnCancel, opts.stepDownAfter)

	c := &client{out: o, opts: opts}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 1024*1024)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			// Not ours to judge the worker; say so in the log and carry on.
			log.Printf("ignoring a line that is not a request: %q: %v", in.Text(), err)
			continue
		}
		log.Printf("request %d %s", req.ID, req.Op)
		var fields map[string]interface{}
		var err error
		switch req.Op {
		case "open":
			fields, err = c.open(req)
		case "acquire":
			fields, err = c.acquire(req)
		case "release":
			err = c.release()
		case "close":
			err = c.close()
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		if err != nil {
			log.Printf("request %d %s failed: %v", req.ID, req.Op, err)
		}
		o.answer(req.ID, fields, err)
	}
	if err := in.Err(); err != nil {
		log.Printf("stdin: %v", err)
	}
	// stdin closed: the worker is done with us.
	c.shutdown()
}
