package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keyhook/keyhook/subscription"
)

const subscriptionsUsage = `Usage: keyhook subscriptions <command> [flags] [id]

Commands:
  list                  list subscriptions (--topic to filter)
  create                register one, from flags or -f file.json
  get ID                show one
  delete ID             delete one
  pause ID              stop its deliveries
  resume ID             restart its deliveries
  seek ID --to WHERE    move its consumer group: earliest, latest,
                        timestamp (--timestamp), offsets (--offset, repeated)
  status ID             delivery status per partition
  keys ID               keys not flowing (--state retrying,in_flight,parked;
                        --limit, default 100)
  deliveries ID [DELIVERY_ID]
                        the delivery log: recent deliveries (--failed for
                        those with a failed attempt; --limit, default 20),
                        or one delivery's attempts

Every command takes --api-url (KEYHOOK_API_URL, default http://127.0.0.1:8080),
--token (KEYHOOK_TOKEN) and -o table|json.
`

// subscriptionsCmd runs "keyhook subscriptions ...": an API client.
func subscriptionsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, subscriptionsUsage)
		if len(args) == 0 {
			return fmt.Errorf("keyhook subscriptions: a command is required")
		}
		return nil
	}
	verb, args := args[0], args[1:]
	cmd := "subscriptions " + verb
	fs := flag.NewFlagSet("keyhook "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.add(fs, getenv)

	switch verb {
	case "list":
		topic := fs.String("topic", "", "only subscriptions reading this topic")
		pageSize := fs.Int("page-size", 100, "subscriptions per request (every page is fetched)")
		c, _, err := parseClient(fs, &cf, cmd, args, 0)
		if err != nil {
			return err
		}
		return listSubscriptions(ctx, c, *topic, *pageSize, stdout)
	case "create":
		var sf subscriptionFlags
		sf.add(fs)
		c, _, err := parseClient(fs, &cf, cmd, args, 0)
		if err != nil {
			return err
		}
		body, err := sf.body(cmd)
		if err != nil {
			return err
		}
		header := map[string]string{}
		if sf.idempotencyKey != "" {
			header["Idempotency-Key"] = sf.idempotencyKey
		}
		data, _, err := c.do(ctx, http.MethodPost, "/v1/subscriptions", nil, header, body)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		return showSubscription(c, data, stdout)
	case "get", "pause", "resume":
		c, id, err := parseClient(fs, &cf, cmd, args, 1)
		if err != nil {
			return err
		}
		method, path := http.MethodGet, "/v1/subscriptions/"+url.PathEscape(id)
		if verb != "get" {
			method, path = http.MethodPost, path+"/"+verb
		}
		data, _, err := c.do(ctx, method, path, nil, nil, nil)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		return showSubscription(c, data, stdout)
	case "delete":
		ifMatch := fs.String("if-match", "", "delete only this version: an ETag as GET shows it")
		c, id, err := parseClient(fs, &cf, cmd, args, 1)
		if err != nil {
			return err
		}
		var header map[string]string
		if *ifMatch != "" {
			header = map[string]string{"If-Match": *ifMatch}
		}
		if _, _, err := c.do(ctx, http.MethodDelete, "/v1/subscriptions/"+url.PathEscape(id), nil, header, nil); err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if c.output == "json" {
			return printJSON(stdout, []byte(`{"deleted":`+strconv.Quote(id)+`}`))
		}
		fmt.Fprintf(stdout, "deleted %s\n", id)
		return nil
	case "seek":
		to := fs.String("to", "", "earliest, latest, timestamp or offsets")
		ts := fs.String("timestamp", "", "RFC 3339 time, with --to timestamp")
		var offsets offsetList
		fs.Var(&offsets, "offset", "topic/partition=offset, with --to offsets (repeat for each partition)")
		c, id, err := parseClient(fs, &cf, cmd, args, 1)
		if err != nil {
			return err
		}
		req := map[string]any{"to": *to}
		if *ts != "" {
			req["timestamp"] = *ts
		}
		if len(offsets) > 0 {
			req["offsets"] = offsets
		}
		data, _, err := c.do(ctx, http.MethodPost, "/v1/subscriptions/"+url.PathEscape(id)+"/seek", nil, nil, req)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if c.output == "json" {
			return printJSON(stdout, data)
		}
		var res subscription.SeekResult
		if err := json.Unmarshal(data, &res); err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tPREVIOUS\tOFFSET")
		for _, p := range res.Partitions {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", p.Topic, p.Partition, offsetText(p.Previous), p.Offset)
		}
		return tw.Flush()
	case "keys":
		state := fs.String("state", "", "keep keys in these states: retrying, in_flight, parked (comma-separated)")
		limit := fs.Int("limit", subscription.DefaultKeysLimit, "the most keys shown")
		c, id, err := parseClient(fs, &cf, cmd, args, 1)
		if err != nil {
			return err
		}
		return listKeys(ctx, c, cmd, id, *state, *limit, stdout)
	case "deliveries":
		return deliveriesCmd(ctx, fs, &cf, cmd, args, stdout)
	case "status":
		c, id, err := parseClient(fs, &cf, cmd, args, 1)
		if err != nil {
			return err
		}
		data, _, err := c.do(ctx, http.MethodGet, "/v1/subscriptions/"+url.PathEscape(id)+"/status", nil, nil, nil)
		if err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		if c.output == "json" {
			return printJSON(stdout, data)
		}
		var st subscription.Status
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("keyhook %s: %w", cmd, err)
		}
		switch {
		case st.PausedReason != "":
			fmt.Fprintf(stdout, "paused by %s: %s\n\n", st.PausedBy, st.PausedReason)
		case st.Paused:
			fmt.Fprint(stdout, "paused\n\n")
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tLOG END\tLAG\tWATERMARK\tPENDING\tIN FLIGHT\tBUSY KEYS\tOLDEST PENDING\tOWNER")
		for _, p := range st.Partitions {
			oldest := "-"
			if p.OldestPendingAgeMS != nil {
				oldest = (time.Duration(*p.OldestPendingAgeMS) * time.Millisecond).String()
			}
			owner := p.Owner
			if owner == "" {
				owner = "-"
				if n := sharers(p.Ranges); n > 1 {
					owner = fmt.Sprintf("shared by %d", n)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Topic, p.Partition, offsetText(p.Committed),
				p.LogEnd, p.Lag, offsetText(p.Watermark), p.Pending, p.InFlight, p.InFlightKeys, oldest, owner)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if err := printHolding(stdout, st.Partitions, time.Now()); err != nil {
			return err
		}
		return printBreakers(stdout, st.Breakers, time.Now())
	default:
		fmt.Fprint(stderr, subscriptionsUsage)
		return fmt.Errorf("keyhook subscriptions: unknown command %q", verb)
	}
}

// parseClient parses a command's flags and its n positional arguments
// (0 or 1: the subscription id) and builds its API client.
func parseClient(fs *flag.FlagSet, cf *clientFlags, cmd string, args []string, n int) (*apiClient, string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, "", err
	}
	if len(pos) != n {
		if n == 0 {
			return nil, "", fmt.Errorf("keyhook %s: unexpected argument %q", cmd, pos[0])
		}
		return nil, "", fmt.Errorf("keyhook %s: want one subscription id, got %d arguments", cmd, len(pos))
	}
	c, err := cf.client(cmd)
	if err != nil {
		return nil, "", err
	}
	id := ""
	if n == 1 {
		id = pos[0]
	}
	return c, id, nil
}

func listSubscriptions(ctx context.Context, c *apiClient, topic string, pageSize int, stdout io.Writer) error {
	var all []json.RawMessage
	q := url.Values{"limit": {strconv.Itoa(pageSize)}}
	if topic != "" {
		q.Set("topic", topic)
	}
	for {
		data, _, err := c.do(ctx, http.MethodGet, "/v1/subscriptions", q, nil, nil)
		if err != nil {
			return fmt.Errorf("keyhook subscriptions list: %w", err)
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return fmt.Errorf("keyhook subscriptions list: %w", err)
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	if c.output == "json" {
		if all == nil {
			all = []json.RawMessage{}
		}
		data, err := json.Marshal(all)
		if err != nil {
			return err
		}
		return printJSON(stdout, data)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "ID\tNAME\tTOPICS\tORDERING\tMAX IN FLIGHT\tSTATE\tENDPOINT")
	for _, raw := range all {
		var s subscription.Subscription
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("keyhook subscriptions list: %w", err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Name, strings.Join(s.Topics, ","), s.Ordering, s.MaxInFlight, state(&s), s.Endpoint.URL)
	}
	return tw.Flush()
}

// showSubscription prints one subscription answer.
func showSubscription(c *apiClient, data []byte, stdout io.Writer) error {
	if c.output == "json" {
		return printJSON(stdout, data)
	}
	var s subscription.Subscription
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	tw := newTable(stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", s.ID)
	row("NAME", s.Name)
	row("TOPICS", strings.Join(s.Topics, ","))
	row("ENDPOINT", s.Endpoint.URL)
	row("ORDERING", string(s.Ordering))
	row("MAX IN FLIGHT", strconv.Itoa(s.MaxInFlight))
	if r := s.RateLimit; r.Enabled() {
		row("RATE LIMIT", fmt.Sprintf("%d/s, burst %d", r.PerSecond, r.BurstOrDefault()))
	}
	row("START", string(s.Start))
	dlt := s.DeadLetterTopic
	if dlt == "" {
		dlt = "<topic>.keyhook.dlq"
	}
	row("DEAD LETTERS", dlt)
	row("STATE", state(&s))
	if s.PausedReason != "" {
		row("PAUSED", s.PausedBy+": "+s.PausedReason)
	}
	if s.DisableAfter != "" {
		row("DISABLE AFTER", s.DisableAfter)
	}
	row("VERSION", strconv.FormatInt(s.Version, 10))
	row("CREATED", s.CreatedAt.Format(time.RFC3339))
	row("UPDATED", s.UpdatedAt.Format(time.RFC3339))
	for _, sec := range s.Signing.Secrets {
		if sec.Secret != "" {
			row("SIGNING SECRET", sec.ID+" "+sec.Secret+"  (shown once: store it now)")
		} else {
			row("SIGNING SECRET", sec.ID+" "+sec.Hint+"…")
		}
	}
	return tw.Flush()
}

func state(s *subscription.Subscription) string {
	if s.Paused && s.PausedBy != "" {
		return "paused (" + s.PausedBy + ")"
	}
	if s.Paused {
		return "paused"
	}
	return "active"
}

func offsetText(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// subscriptionFlags build a create body from flags, or read it from -f.
type subscriptionFlags struct {
	file, name, url, ordering, start, deadLetterTopic, idempotencyKey string
	topics                                                            stringList
	maxInFlight, timeoutMS                                            int
	paused                                                            bool
	fs                                                                *flag.FlagSet
}

func (f *subscriptionFlags) add(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.file, "f", "", "read the subscription JSON from this file (- for stdin) instead of flags")
	fs.StringVar(&f.name, "name", "", "subscription name")
	fs.Var(&f.topics, "topic", "topic to read (repeat for several)")
	fs.StringVar(&f.url, "url", "", "endpoint URL")
	fs.IntVar(&f.timeoutMS, "timeout-ms", 0, "endpoint timeout per attempt in ms (0: the node's default)")
	fs.StringVar(&f.ordering, "ordering", "", "key (default), partition or none")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "concurrent deliveries per node (default 256)")
	fs.StringVar(&f.start, "start", "", "earliest (default) or latest")
	fs.StringVar(&f.deadLetterTopic, "dead-letter-topic", "", `dead-letter topic (default <topic>.keyhook.dlq; "none" disables)`)
	fs.BoolVar(&f.paused, "paused", false, "create it paused")
	fs.StringVar(&f.idempotencyKey, "idempotency-key", "", "repeat-safe create: the same key and body within 24h create one subscription")
}

// body returns the request body: the file's bytes, or JSON built from
// the flags given (flags left out are left to the API's defaults).
func (f *subscriptionFlags) body(cmd string) ([]byte, error) {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.file != "" {
		for _, n := range []string{"name", "topic", "url", "timeout-ms", "ordering", "max-in-flight", "start", "dead-letter-topic", "paused"} {
			if given[n] {
				return nil, fmt.Errorf("keyhook %s: -f and --%s: give the subscription in the file or in flags, not both", cmd, n)
			}
		}
		var data []byte
		var err error
		if f.file == "-" {
			data, err = io.ReadAll(io.LimitReader(os.Stdin, maxAnswerBytes))
		} else {
			data, err = os.ReadFile(f.file)
		}
		if err != nil {
			return nil, fmt.Errorf("keyhook %s: -f: %w", cmd, err)
		}
		return data, nil
	}
	body := map[string]any{"name": f.name, "topics": []string(f.topics)}
	endpoint := map[string]any{"url": f.url}
	if given["timeout-ms"] {
		endpoint["timeout_ms"] = f.timeoutMS
	}
	body["endpoint"] = endpoint
	if given["ordering"] {
		body["ordering"] = f.ordering
	}
	if given["max-in-flight"] {
		body["max_in_flight"] = f.maxInFlight
	}
	if given["start"] {
		body["start"] = f.start
	}
	if given["dead-letter-topic"] {
		body["dead_letter_topic"] = f.deadLetterTopic
	}
	if given["paused"] {
		body["paused"] = f.paused
	}
	return json.Marshal(body)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// offsetList is the repeatable --offset topic/partition=offset flag.
type offsetList []subscription.SeekOffset

func (l *offsetList) String() string {
	parts := make([]string, len(*l))
	for i, o := range *l {
		parts[i] = fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.Offset)
	}
	return strings.Join(parts, " ")
}

func (l *offsetList) Set(v string) error {
	tp, off, ok := strings.Cut(v, "=")
	i := strings.LastIndex(tp, "/")
	if !ok || i <= 0 {
		return fmt.Errorf("want topic/partition=offset, got %q", v)
	}
	p, err := strconv.ParseInt(tp[i+1:], 10, 32)
	if err != nil {
		return fmt.Errorf("partition in %q: %w", v, err)
	}
	o, err := strconv.ParseInt(off, 10, 64)
	if err != nil {
		return fmt.Errorf("offset in %q: %w", v, err)
	}
	*l = append(*l, subscription.SeekOffset{Topic: tp[:i], Partition: int32(p), Offset: o})
	return nil
}

// sharers counts the distinct owners of a partition's ranges.
func sharers(rs []subscription.RangeStatus) int {
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Owner != "" {
			seen[r.Owner] = true
		}
	}
	return len(seen)
}

// printHolding says, for each partition whose watermark waits for a
// record, which one and why: the question every Kafka consumer's user
// asks when the commit does not move.
func printHolding(w io.Writer, ps []subscription.PartitionStatus, now time.Time) error {
	var lines []string
	for _, p := range ps {
		h := p.Holding
		if h == nil {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %s/%d: offset %d", p.Topic, p.Partition, h.Offset)
		if h.Key != "" {
			fmt.Fprintf(&b, " (key %q)", h.Key)
		}
		fmt.Fprintf(&b, ", read %s ago", roundAge(time.Duration(h.AgeMS)*time.Millisecond))
		switch {
		case h.Attempts > 0:
			fmt.Fprintf(&b, ", %d attempts", h.Attempts)
			if h.LastStatus != 0 {
				fmt.Fprintf(&b, ", last answered %d", h.LastStatus)
			} else if h.LastError != "" {
				fmt.Fprintf(&b, ", last failed: %s", h.LastError)
			}
			if h.NextAttempt != nil {
				fmt.Fprintf(&b, ", next attempt in %s", roundAge(h.NextAttempt.Sub(now)))
			}
		case h.Dispatched != nil:
			fmt.Fprintf(&b, ", first attempt in flight for %s", roundAge(now.Sub(*h.Dispatched)))
		default:
			b.WriteString(", not sent yet (its key's earlier record or a delivery slot)")
		}
		fmt.Fprintf(&b, "; %d records pending behind it", h.Behind)
		if h.Parked > 0 {
			fmt.Fprintf(&b, " (%d parked by offset", h.Parked)
			if h.OldestParkedAgeMS != nil {
				fmt.Fprintf(&b, ", the oldest read %s ago", roundAge(time.Duration(*h.OldestParkedAgeMS)*time.Millisecond))
			}
			b.WriteString(")")
		}
		lines = append(lines, b.String())
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nThe watermark waits for:\n%s\n", strings.Join(lines, "\n"))
	return err
}

// printBreakers names the nodes that stopped sending to the endpoint:
// its circuit breaker there is open or half-open.
func printBreakers(w io.Writer, bs []subscription.EndpointBreaker, now time.Time) error {
	if len(bs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nThe endpoint's circuit breaker is not closed on:\n")
	for _, br := range bs {
		fmt.Fprintf(&b, "  %s: %s for %s, %d deliveries waiting (%s)\n", br.Node, br.State, roundAge(now.Sub(br.Since)), br.Waiting, br.Origin)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// roundAge shows a duration to the second, or to the millisecond below one.
func roundAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
