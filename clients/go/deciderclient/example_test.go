package deciderclient_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Route one request and release its lease when the engine has answered. This example needs a
// decider listening on decider:9090, so it is compiled but not run.
func Example() {
	c, err := deciderclient.Dial("decider:9090",
		deciderclient.WithTimeout(200*time.Millisecond),
		deciderclient.WithRetryUnavailable(3, 20*time.Millisecond),
		deciderclient.WithToken("router-token"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "llama", InputTokens: 512})
	if err != nil {
		fmt.Println("decide failed:", deciderclient.Reason(err), err)
		return
	}
	if pd := resp.GetPick().GetPd(); pd != nil {
		fmt.Println("prefill at", pd.GetPrefill().GetUrl(), "decode at", pd.GetDecode().GetUrl())
	} else {
		fmt.Println("forward to", resp.GetPick().GetPlain().GetUrl())
	}

	// ... forward the request; then report how it went.
	if _, err := c.Release(ctx, resp.GetLeaseId(), sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS); err != nil {
		fmt.Println("release failed:", err)
	}
}

// New wraps a connection the caller already owns and keeps owning (Close does not close it).
// This example needs a decider listening on decider:9090, so it is compiled but not run.
func ExampleNew() {
	conn, err := grpc.NewClient("decider:9090", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	c := deciderclient.New(conn, deciderclient.WithTimeout(time.Second))
	resp, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "llama", InputTokens: 512, DryRun: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("would route to", resp.GetPick().GetPlain().GetEngineId())
}

// Reason and Rejections read the details of a decider error. The error here is built by hand,
// as a decider returns it when every compatible bucket refused admission.
func ExampleRejections() {
	st, err := status.New(codes.Unavailable, "every compatible bucket refused admission").WithDetails(
		&errdetails.ErrorInfo{Reason: "ADMISSION_REJECTED", Domain: "sluice.dev"},
		&sluicev1.AdmissionRejections{Rejections: []*sluicev1.AdmissionRejection{
			{BucketId: "short", Role: sluicev1.Role_ROLE_PLAIN, EngineId: "a", Limit: "max_running_requests"},
		}})
	if err != nil {
		panic(err)
	}
	err = st.Err()

	fmt.Println(status.Code(err), deciderclient.Reason(err))
	for _, r := range deciderclient.Rejections(err) {
		fmt.Printf("bucket %s engine %s at %s\n", r.GetBucketId(), r.GetEngineId(), r.GetLimit())
	}
	// Output:
	// Unavailable ADMISSION_REJECTED
	// bucket short engine a at max_running_requests
}

// A decider replica that sheds a Decide call says so, with a retry hint. The error here is
// built by hand, as a decider returns it.
func ExampleOverloaded() {
	st, err := status.New(codes.ResourceExhausted, "too many decides in progress").WithDetails(
		&errdetails.ErrorInfo{Reason: deciderclient.ReasonOverloaded, Domain: "sluice.dev"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		panic(err)
	}
	err = st.Err()

	if deciderclient.Overloaded(err) {
		fmt.Println("overloaded; retry in", deciderclient.RetryDelay(err))
	}
	// Output:
	// overloaded; retry in 50ms
}
