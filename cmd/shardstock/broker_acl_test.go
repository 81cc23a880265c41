package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/shardstock/shardstock/messaging"
)

// TestBrokerACL runs against the real broker of deploy/with-services.sh,
// started by deploy/rocketmq.sh with its ACL (issue 25): a client without
// credentials publishes nothing and consumes nothing; the payment centre's
// role publishes payment results but neither a settlement nor a
// reservation, and consumes nothing. The coordinators' role works (here as
// the control of each refusal, and in every other RocketMQ test).
//
// Each refusal is measured against a control that succeeds at the same
// moment: the payment role's refused sends come from the producer whose
// send to the payments topic just went through, and the consumers that get
// nothing ran beside a coordinator's consumer that got the message. With
// SHARDSTOCK_RMQ_ACL=off every assertion here fails.
func TestBrokerACL(t *testing.T) {
	coordURL := service(t, "SHARDSTOCK_TEST_ROCKETMQ")
	payURL := service(t, "SHARDSTOCK_TEST_ROCKETMQ_PAYMENT")
	coord, err := messaging.ParseRocketMQ(coordURL)
	if err != nil {
		t.Fatal(err)
	}
	pay, err := messaging.ParseRocketMQ(payURL)
	if err != nil {
		t.Fatal(err)
	}
	if coord.Credentials.IsZero() || pay.Credentials.IsZero() {
		t.Fatal("the test broker's URLs carry no credentials (deploy/with-services.sh)")
	}
	b := make([]byte, 4)
	rand.Read(b)
	run := hex.EncodeToString(b)
	ns := "acl" + run
	// The coordinators' clients make the topics: shardstock's own (the
	// payment role's grant names shardstock_payments), and a namespace of
	// this run's for what is consumed.
	rocketClient(t, coordURL, "acl-coordinator")
	coordNS := rocketClient(t, coordURL+"?namespace="+ns, "acl-coordinator-ns")
	settlementsNS := ns + "_" + messaging.TopicSettlements
	ctx := context.Background()

	t.Run("without credentials nothing is published", func(t *testing.T) {
		anon := aclProducer(t, coord.NameServer, messaging.Credentials{}, "acl-anon")
		for _, topic := range []string{settlementsNS, ns + "_" + messaging.TopicReservations, messaging.TopicPayments, messaging.TopicSettlements} {
			if err := aclSend(ctx, anon, topic, "anon-"+run); err == nil {
				t.Errorf("a client without credentials published to %s", topic)
			} else {
				t.Logf("%s without credentials: %v", topic, err)
			}
		}
	})

	t.Run("the payment role publishes payment results only", func(t *testing.T) {
		p := aclProducer(t, pay.NameServer, pay.Credentials, "acl-payment-centre")
		// The control: the payments topic takes the role's message.
		if err := aclSend(ctx, p, messaging.TopicPayments, `{"test":"broker acl `+run+`"}`); err != nil {
			t.Fatalf("the payment role cannot publish to %s: %v", messaging.TopicPayments, err)
		}
		for _, topic := range []string{messaging.TopicSettlements, messaging.TopicReservations, messaging.TopicDeadPayments, settlementsNS} {
			if err := aclSend(ctx, p, topic, "forged-"+run); err == nil {
				t.Errorf("the payment role published to %s", topic)
			} else {
				t.Logf("%s as the payment role: %v", topic, err)
			}
		}
	})

	t.Run("without credentials or as the payment role nothing is consumed", func(t *testing.T) {
		marker := "settlement-" + run
		if err := coordNS.Publish(ctx, messaging.TopicSettlements, marker, []byte(marker)); err != nil {
			t.Fatalf("the coordinator's role cannot publish: %v", err)
		}
		control := aclConsume(t, coord.NameServer, coord.Credentials, ns+"_acl-coordinator", settlementsNS)
		anon := aclConsume(t, coord.NameServer, messaging.Credentials{}, ns+"_acl-anon", settlementsNS)
		payer := aclConsume(t, pay.NameServer, pay.Credentials, ns+"_acl-payment", settlementsNS)
		waitFor(t, 90*time.Second, "the coordinator's consumer getting the settlement", func() (bool, string) {
			got := control.bodies()
			return slices.Contains(got, marker), fmt.Sprint(got)
		})
		// As long again for the others as the control needed, and more.
		time.Sleep(5 * time.Second)
		if got := control.bodies(); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "anon-") || strings.HasPrefix(s, "forged-") }) {
			t.Errorf("the topic holds what was refused: %q", got)
		}
		for _, c := range []*aclReader{anon, payer} {
			if got := c.bodies(); len(got) > 0 {
				t.Errorf("%s consumed %q", c.who, got)
			} else {
				t.Logf("%s consumed nothing (start: %v)", c.who, c.startErr)
			}
		}
	})
}

// aclProducer is a plain rocketmq-client-go producer signing with creds
// (none when zero), shut down when the test ends.
func aclProducer(t *testing.T, nameServer string, creds messaging.Credentials, who string) rmq.Producer {
	t.Helper()
	opts := []producer.Option{producer.WithNameServer([]string{nameServer}),
		producer.WithGroupName(who), producer.WithInstanceName(who + "-" + messaging.ConsumerName()),
		producer.WithRetry(1), producer.WithSendMsgTimeout(3 * time.Second)}
	if !creds.IsZero() {
		opts = append(opts, producer.WithCredentials(primitive.Credentials{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}))
	}
	p, err := rmq.NewProducer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

// aclSend sends body to topic (its full name) and reports whether the
// broker stored it. A topic made a moment ago may not be in the name
// server's routes yet: that error, the client's own and not the broker's
// answer, is waited out (30 s at most).
func aclSend(ctx context.Context, p rmq.Producer, topic, body string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := aclSendOnce(ctx, p, topic, body)
		if err == nil || !strings.Contains(err.Error(), "route info not found") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func aclSendOnce(ctx context.Context, p rmq.Producer, topic, body string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte(body)))
	if err != nil {
		return err
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("status %d", res.Status)
	}
	return nil
}

// aclReader collects what a consumer got.
type aclReader struct {
	who      string
	startErr error
	mu       sync.Mutex
	got      []string
}

func (r *aclReader) bodies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// aclConsume starts a push consumer of group on topic (full names) from the
// first offset, signing with creds; a consumer the broker does not let
// start consumes nothing, which is recorded, not fatal.
func aclConsume(t *testing.T, nameServer string, creds messaging.Credentials, group, topic string) *aclReader {
	t.Helper()
	r := &aclReader{who: group}
	opts := []consumer.Option{consumer.WithNameServer([]string{nameServer}), consumer.WithGroupName(group),
		consumer.WithInstance(group + "-" + messaging.ConsumerName()), consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	if !creds.IsZero() {
		opts = append(opts, consumer.WithCredentials(primitive.Credentials{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}))
	}
	c, err := rmq.NewPushConsumer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range msgs {
			r.got = append(r.got, string(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.startErr = c.Start(); r.startErr == nil {
		t.Cleanup(func() { c.Shutdown() })
	}
	return r
}
