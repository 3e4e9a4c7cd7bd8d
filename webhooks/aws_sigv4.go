package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// DefaultAWSService is the service an [AWSSigV4] signs for when it names
// none: Lambda function URLs.
const DefaultAWSService = "lambda"

// AWSSigV4 signs every attempt with AWS Signature Version 4, as a Lambda
// function URL with auth type AWS_IAM or an API Gateway route with IAM
// authorization expects. The credentials are the node's, found by the
// standard AWS chain (environment, shared config, web identity as with
// IRSA on EKS, ECS and EC2 roles), or a role assumed with them.
type AWSSigV4 struct {
	// Region is the endpoint's AWS region, such as "eu-west-1". Required.
	Region string
	// Service is the signing name: "lambda" (default) for function URLs,
	// "execute-api" for API Gateway.
	Service string
	// RoleARN, if set, is a role assumed with the node's credentials; the
	// signature is then the role's.
	RoleARN string
}

var (
	awsRegion  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`)
	awsService = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
	awsRoleARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$`)
)

// awsSignedHeaders are the headers a signature sets: credentials, which a
// redirect to another origin must drop.
var awsSignedHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

func (s *AWSSigV4) validate() error {
	if s == nil {
		return nil
	}
	switch {
	case !awsRegion.MatchString(s.Region):
		return errors.New(`auth.aws_sigv4.region must be an AWS region such as "eu-west-1"`)
	case s.Service != "" && !awsService.MatchString(s.Service):
		return errors.New(`auth.aws_sigv4.service must be a signing name such as "lambda" or "execute-api"`)
	case s.RoleARN != "" && !awsRoleARN.MatchString(s.RoleARN):
		return errors.New("auth.aws_sigv4.role_arn must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
	}
	return nil
}

func (s *AWSSigV4) service() string {
	if s.Service == "" {
		return DefaultAWSService
	}
	return s.Service
}

// cacheKey names the credentials s signs with; the node's chain itself
// does not change while the process runs.
func (s *AWSSigV4) cacheKey() string { return "aws\x00" + s.Region + "\x00" + s.RoleARN }

// awsCredentials returns the credentials s signs with, cached and
// refreshed by the SDK before they expire. They come from the node's
// environment, so fetching them (instance metadata, STS) is not endpoint
// egress and does not go through the address policy.
func awsCredentials(ctx context.Context, s *AWSSigV4) (aws.CredentialsProvider, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(s.Region))
	if err != nil {
		return nil, fmt.Errorf("webhooks: aws credentials: %w", err)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("webhooks: aws credentials: none found in the environment")
	}
	if s.RoleARN == "" {
		return cfg.Credentials, nil
	}
	role := stscreds.NewAssumeRoleProvider(sts.NewFromConfig(cfg), s.RoleARN, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = "keyhook"
	})
	return aws.NewCredentialsCache(role), nil
}

// sign signs req, whose body is body, at now: the payload hash is sent as
// X-Amz-Content-Sha256 and covered by the signature, so is every header
// already set. It runs last, just before the request leaves, so each
// attempt carries a fresh date and signs what is sent.
func (s *AWSSigV4) sign(ctx context.Context, creds aws.CredentialsProvider, req *http.Request, body []byte, now time.Time) error {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	c, err := creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: aws credentials: %w", err)
	}
	if err := v4.NewSigner().SignHTTP(ctx, c, req, hash, s.service(), s.Region, now.UTC()); err != nil {
		return fmt.Errorf("webhooks: aws sigv4: %w", err)
	}
	return nil
}
