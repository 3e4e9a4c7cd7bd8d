package dev.keyhook.bench;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The Confluent Parallel Consumer contender of keyhook's bench: records of
 * one topic posted to the bench's sink, in key order, with at most
 * maxConcurrency posts in flight, through a blocking HTTP client. A post
 * answered other than 2xx is retried by the Parallel Consumer.
 *
 * <p>Arguments: brokers topic group sinkURL maxConcurrency. It prints
 * "ready" once subscribed and stops, committing what it processed, on
 * SIGTERM.
 */
public final class PCBench {
  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: PCBench brokers topic group sinkURL maxConcurrency");
      System.exit(2);
    }
    String brokers = args[0], topic = args[1], group = args[2];
    URI sink = URI.create(args[3]);
    int maxConcurrency = Integer.parseInt(args[4]);

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    // The Parallel Consumer commits itself.
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);

    ParallelConsumerOptions<byte[], byte[]> options =
        ParallelConsumerOptions.<byte[], byte[]>builder()
            .consumer(consumer)
            .ordering(ProcessingOrder.KEY)
            .maxConcurrency(maxConcurrency)
            .commitMode(CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
            // kafka-clients 3.7 and later hide the field the check reads.
            .ignoreReflectiveAccessExceptionsForAutoCommitDisabledCheck(true)
            .build();
    ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);

    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5))
            .build();

    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  pc.closeDrainFirst(Duration.ofSeconds(10));
                  stopped.countDown();
                }));

    pc.subscribe(List.of(topic));
    pc.poll(
        ctx -> {
          ConsumerRecord<byte[], byte[]> r = ctx.getSingleConsumerRecord();
          HttpRequest req =
              HttpRequest.newBuilder(sink)
                  .timeout(Duration.ofSeconds(30))
                  .header("Content-Type", "application/octet-stream")
                  .header("Keyhook-Partition", Integer.toString(r.partition()))
                  .header("Keyhook-Offset", Long.toString(r.offset()))
                  .POST(HttpRequest.BodyPublishers.ofByteArray(r.value()))
                  .build();
          HttpResponse<Void> resp;
          try {
            resp = http.send(req, HttpResponse.BodyHandlers.discarding());
          } catch (IOException e) {
            throw new RuntimeException("post: " + e.getMessage(), e);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RuntimeException("post interrupted", e);
          }
          if (resp.statusCode() / 100 != 2) {
            throw new RuntimeException("endpoint answered " + resp.statusCode());
          }
        });
    System.out.println("ready");
    System.out.flush();
    stopped.await();
  }
}
