package messaging

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/hashicorp/go-multierror"
)

// Topics of the RocketMQ transport.
const (
	TopicReservations = "shardstock_reservations"
	TopicSettlements  = "shardstock_settlements"
	// TopicDeadReservations keeps, one by one, reservations the order
	// service can never write (a product not in its catalog): for an
	// operator, out of the way of the valid ones.
	TopicDeadReservations = "shardstock_reservations_dead"
	// TopicPayments carries payment results from the payment centre
	// (PropSignature: their signature); TopicDeadPayments keeps the ones
	// the order service refused (PropReason says why).
	TopicPayments     = "shardstock_payments"
	TopicDeadPayments = "shardstock_payments_dead"
	// TopicDeadSettlements keeps the settlements the order table does not
	// bear out (forged, or contradicting their order; PropReason says why).
	TopicDeadSettlements = "shardstock_settlements_dead"
)

// User properties of a payment message.
const (
	PropSignature = "signature"
	PropReason    = "reason"
)

// RocketMQConfig locates the broker.
type RocketMQConfig struct {
	NameServer string // host:port
	Broker     string // host:port of the broker, for creating topics
	Instance   string // unique per process (client instance name)
	// Namespace prefixes every topic and group, so several deployments (or
	// test runs) can share one broker without reading each other's
	// messages.
	Namespace string
	// Credentials sign every request to the broker (its ACL); zero: none.
	Credentials Credentials
}

// Credentials are a user of the broker's ACL: the access key names it, the
// secret key signs its requests (HMAC; the secret never goes on the wire).
// Printed, the secret shows as "***".
type Credentials struct {
	AccessKey, SecretKey string
}

// IsZero reports whether no credentials are set.
func (c Credentials) IsZero() bool { return c.AccessKey == "" && c.SecretKey == "" }

// String shows the access key only.
func (c Credentials) String() string {
	if c.IsZero() {
		return "none"
	}
	return c.AccessKey + ":***"
}

// GoString keeps the secret out of %#v.
func (c Credentials) GoString() string { return "messaging.Credentials{" + c.String() + "}" }

// Format keeps the secret out of %v, %+v and %s.
func (c Credentials) Format(f fmt.State, _ rune) { fmt.Fprint(f, c.String()) }

// ParseCredentials reads "ACCESSKEY:SECRETKEY" (what deploy/rocketmq.sh
// credentials prints). Its error never repeats the input.
func ParseCredentials(s string) (Credentials, error) {
	ak, sk, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || ak == "" || sk == "" {
		return Credentials{}, errors.New("credentials must be ACCESSKEY:SECRETKEY")
	}
	return Credentials{AccessKey: ak, SecretKey: sk}, nil
}

func (c Credentials) primitive() primitive.Credentials {
	return primitive.Credentials{AccessKey: c.AccessKey, SecretKey: c.SecretKey}
}

// ParseRocketMQ parses
// "rocketmq://[ACCESSKEY:SECRETKEY@]HOST:9876[?broker=HOST:10911&namespace=NAME]";
// the broker defaults to the name server's host on port 10911. Its errors
// never show the secret.
func ParseRocketMQ(raw string) (RocketMQConfig, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "rocketmq" || u.Host == "" {
		shown := "(unparseable URL)"
		if err == nil {
			shown = u.Redacted()
		}
		return RocketMQConfig{}, fmt.Errorf("%q is not rocketmq://HOST:PORT", shown)
	}
	q := u.Query()
	c := RocketMQConfig{NameServer: u.Host, Broker: q.Get("broker"), Namespace: q.Get("namespace")}
	if u.User != nil {
		sk, _ := u.User.Password()
		if u.User.Username() == "" || sk == "" {
			return RocketMQConfig{}, errors.New("credentials in the URL must be ACCESSKEY:SECRETKEY@")
		}
		c.Credentials = Credentials{AccessKey: u.User.Username(), SecretKey: sk}
	}
	if c.Broker == "" {
		c.Broker = u.Hostname() + ":10911"
	}
	for _, r := range c.Namespace {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return c, fmt.Errorf("namespace %q: use letters, digits, _ and -", c.Namespace)
		}
	}
	return c, nil
}

// RocketMQ is one process's connection to the broker: a single producer,
// started once, and the push consumers it subscribes.
type RocketMQ struct {
	cfg       RocketMQConfig
	producer  rmq.Producer
	mu        sync.Mutex // guards consumers
	consumers []rmq.PushConsumer
}

// OpenRocketMQ starts the producer and creates the topics (a push consumer
// cannot start on a topic the name server does not know yet).
func OpenRocketMQ(ctx context.Context, cfg RocketMQConfig) (*RocketMQ, error) {
	rlog.SetLogLevel("error")
	topics := []string{TopicReservations, TopicSettlements, TopicDeadReservations, TopicPayments, TopicDeadPayments, TopicDeadSettlements}
	for i, t := range topics {
		topics[i] = cfg.name(t)
	}
	if err := createTopics(ctx, cfg, topics...); err != nil {
		return nil, err
	}
	opts := []producer.Option{
		producer.WithNameServer([]string{cfg.NameServer}),
		producer.WithGroupName(cfg.name("shardstock-producer")),
		// A client of its own: the library shares one client per instance
		// name, and a producer shutting a shared client down races with the
		// consumers' callbacks on it (seen by the race detector).
		producer.WithInstanceName(cfg.Instance + "-producer"),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(3 * time.Second),
	}
	if !cfg.Credentials.IsZero() {
		opts = append(opts, producer.WithCredentials(cfg.Credentials.primitive()))
	}
	p, err := rmq.NewProducer(opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq producer start: %w", err)
	}
	return &RocketMQ{cfg: cfg, producer: p}, nil
}

// name puts the namespace in front of a topic or group name.
func (c RocketMQConfig) name(n string) string {
	if c.Namespace == "" {
		return n
	}
	return c.Namespace + "_" + n
}

func createTopics(ctx context.Context, cfg RocketMQConfig, topics ...string) error {
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver([]string{cfg.NameServer}))}
	if !cfg.Credentials.IsZero() {
		opts = append(opts, admin.WithCredentials(cfg.Credentials.primitive()))
	}
	a, err := admin.NewAdmin(opts...)
	if err != nil {
		return fmt.Errorf("rocketmq admin: %w", err)
	}
	defer a.Close()
	if !cfg.Credentials.IsZero() {
		// rocketmq-client-go's admin signs its requests to the broker
		// only once its client registered the ACL hook, which only
		// GetAllSubscriptionGroup does (the admin's client is never
		// started, and CreateTopic does not): call it with a context
		// already done, so it registers the hook and sends nothing.
		// (Its failure is logged at error level: hushed for the call.)
		done, cancel := context.WithCancel(ctx)
		cancel()
		rlog.SetLogLevel("fatal")
		a.GetAllSubscriptionGroup(done, cfg.Broker, time.Millisecond)
		rlog.SetLogLevel("error")
	}
	for _, t := range topics {
		if err := a.CreateTopic(ctx, admin.WithTopicCreate(t), admin.WithBrokerAddrCreate(cfg.Broker),
			admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
			return fmt.Errorf("rocketmq: create topic %s on %s: %w", t, cfg.Broker, err)
		}
	}
	return nil
}

// Publish sends body to topic (within the namespace) with key, synchronously (SendSync retries).
func (r *RocketMQ) Publish(ctx context.Context, topic, key string, body []byte) error {
	return r.PublishMessage(ctx, topic, key, Message{Body: body})
}

// Message is a message's body and its user properties.
type Message struct {
	Body       []byte
	Properties map[string]string
}

// PublishMessage is Publish for a message with user properties.
func (r *RocketMQ) PublishMessage(ctx context.Context, topic, key string, m Message) error {
	msg := primitive.NewMessage(r.cfg.name(topic), m.Body)
	msg.WithKeys([]string{key})
	if len(m.Properties) > 0 {
		msg.WithProperties(m.Properties)
	}
	res, err := r.producer.SendSync(ctx, msg)
	if err != nil {
		return fmt.Errorf("rocketmq send %s: %w", topic, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("rocketmq send %s: status %d", topic, res.Status)
	}
	return nil
}

// PublishBatch sends bodies to topic in one batch (one broker round trip),
// keys[i] being the key of bodies[i]; the broker stores all or none of them.
func (r *RocketMQ) PublishBatch(ctx context.Context, topic string, keys []string, bodies [][]byte) error {
	if len(bodies) == 0 {
		return nil
	}
	msgs := make([]*primitive.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = primitive.NewMessage(r.cfg.name(topic), b)
		msgs[i].WithKeys([]string{keys[i]})
	}
	res, err := r.producer.SendSync(ctx, msgs...)
	if err != nil {
		return fmt.Errorf("rocketmq send %d to %s: %w", len(msgs), topic, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("rocketmq send %d to %s: status %d", len(msgs), topic, res.Status)
	}
	return nil
}

// MessageHandler processes one message body; an error asks for redelivery.
type MessageHandler func(ctx context.Context, body []byte) error

// SubscribeMessages is Subscribe for a handler that reads the messages'
// user properties too.
func (r *RocketMQ) SubscribeMessages(group, topic string, h func(ctx context.Context, m Message) error) error {
	return r.subscribe(group, topic, 1, func(ctx context.Context, msgs []*primitive.MessageExt) error {
		for _, m := range msgs {
			if err := h(ctx, Message{Body: m.Body, Properties: m.GetProperties()}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Subscribe starts a clustering push consumer of group on topic. A handler
// error answers ConsumeRetryLater (the message comes back through the
// group's %RETRY% topic).
func (r *RocketMQ) Subscribe(group, topic string, h MessageHandler) error {
	return r.SubscribeBatch(group, topic, 1, func(ctx context.Context, bodies [][]byte) error {
		for _, b := range bodies {
			if err := h(ctx, b); err != nil {
				return err
			}
		}
		return nil
	})
}

// SubscribeBatch is Subscribe for a handler that takes up to max messages
// at once. A handler error hands every message of the call back to the
// broker, so the handler must be idempotent for the ones it had handled.
//
// A topic created a moment ago may not have reached the name server's
// routes yet ("route info not found"): the start is tried again for up to
// 20 s before it fails with that error.
func (r *RocketMQ) SubscribeBatch(group, topic string, max int, h func(ctx context.Context, bodies [][]byte) error) error {
	return r.subscribe(group, topic, max, func(ctx context.Context, msgs []*primitive.MessageExt) error {
		bodies := make([][]byte, len(msgs))
		for i, m := range msgs {
			bodies[i] = m.Body
		}
		return h(ctx, bodies)
	})
}

// subscribe starts the consumer, tried again while the topic's route is
// not known yet (see SubscribeBatch).
func (r *RocketMQ) subscribe(group, topic string, max int, h func(ctx context.Context, msgs []*primitive.MessageExt) error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.subscribeBatch(group, topic, max, h)
		if err == nil || !strings.Contains(err.Error(), "route info not found") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *RocketMQ) subscribeBatch(group, topic string, max int, h func(ctx context.Context, msgs []*primitive.MessageExt) error) error {
	opts := []consumer.Option{
		consumer.WithConsumeMessageBatchMaxSize(max),
		consumer.WithNameServer([]string{r.cfg.NameServer}),
		consumer.WithGroupName(r.cfg.name(group)),
		// A client of its own per consumer: consumers sharing one client
		// race inside the library when one starts while another rebalances
		// (seen by the race detector with three consumers).
		consumer.WithInstance(r.cfg.Instance + "-" + group),
		consumer.WithConsumerModel(consumer.Clustering),
		// A group seen for the first time starts at the first offset, so
		// reservations relayed before it first ran are not skipped; the
		// consumers are idempotent, so re-reading is harmless.
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithMaxReconsumeTimes(1000),
	}
	if max > 32 {
		// a pull brings up to max messages, so a call can have them all
		// (the client pulls 32 by default; the broker's own caps are its
		// maxTransferCount and maxTransferBytes settings, in memory and
		// on disk: deploy/rocketmq.sh raises them)
		opts = append(opts, consumer.WithPullBatchSize(int32(max)))
	}
	if !r.cfg.Credentials.IsZero() {
		opts = append(opts, consumer.WithCredentials(r.cfg.Credentials.primitive()))
	}
	c, err := rmq.NewPushConsumer(opts...)
	if err != nil {
		return fmt.Errorf("rocketmq consumer %s: %w", group, err)
	}
	err = c.Subscribe(r.cfg.name(topic), consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		if err := h(ctx, msgs); err != nil {
			return consumer.ConsumeRetryLater, err
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return fmt.Errorf("rocketmq subscribe %s: %w", topic, err)
	}
	if err := c.Start(); err != nil {
		c.Shutdown()
		return fmt.Errorf("rocketmq consumer %s start: %w", group, err)
	}
	r.mu.Lock()
	r.consumers = append(r.consumers, c)
	r.mu.Unlock()
	return nil
}

// Close shuts the consumers down, then the producer.
func (r *RocketMQ) Close() error {
	var errs *multierror.Error
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.consumers) - 1; i >= 0; i-- {
		if err := r.consumers[i].Shutdown(); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("rocketmq consumer: %w", err))
		}
	}
	if err := r.producer.Shutdown(); err != nil && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "already") {
		errs = multierror.Append(errs, fmt.Errorf("rocketmq producer: %w", err))
	}
	return errs.ErrorOrNil()
}
