"""Sends a fine-tune pipeline's OpenLineage events with the real openlineage-python
client (HTTP transport, API key auth) to a Threadline server. Used by the e2e suite."""

import argparse
import datetime
import uuid

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import (
    DatasetEvent,
    InputDataset,
    Job,
    JobEvent,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
    StaticDataset,
)
from openlineage.client.facet_v2 import (
    data_quality_metrics_input_dataset,
    dataset_version_dataset,
    parent_run,
    schema_dataset,
)
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport

PRODUCER = "https://github.com/threadline/tests/openlineage_send"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--parent-run-id", required=True)
    args = parser.parse_args()

    config = HttpConfig(url=args.url, auth=ApiKeyTokenProvider({"apiKey": args.api_key}))
    client = OpenLineageClient(transport=HttpTransport(config))

    schema = schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name="question", type="string"),
            schema_dataset.SchemaDatasetFacetFields(name="answer", type="string"),
        ]
    )
    train = InputDataset(
        namespace="warehouse",
        name="fin-qa",
        facets={
            "schema": schema,
            "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion="v3"),
        },
        inputFacets={
            "dataQualityMetrics": data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
                rowCount=12000,
                columnMetrics={
                    "answer": data_quality_metrics_input_dataset.ColumnMetrics(nullCount=12, distinctCount=11800)
                },
            )
        },
    )
    artifact = OutputDataset(namespace="s3://models", name="fin-lora/7")
    job = Job(namespace="training", name="finetune-fin")
    parent = parent_run.ParentRunFacet(
        run=parent_run.Run(runId=args.parent_run_id),
        job=parent_run.Job(namespace="airflow", name="nightly-finetune"),
    )
    t0 = datetime.datetime(2026, 11, 29, 2, 0, tzinfo=datetime.timezone.utc)
    for state, minutes in [(RunState.START, 0), (RunState.RUNNING, 30), (RunState.COMPLETE, 95)]:
        client.emit(
            RunEvent(
                eventType=state,
                eventTime=(t0 + datetime.timedelta(minutes=minutes)).isoformat(),
                run=Run(runId=args.run_id, facets={"parent": parent}),
                job=job,
                inputs=[train],
                outputs=[artifact] if state == RunState.COMPLETE else [],
                producer=PRODUCER,
            )
        )
    client.emit(
        DatasetEvent(
            eventTime=t0.isoformat(),
            dataset=StaticDataset(namespace="warehouse", name="fin-qa-holdout", facets={"schema": schema}),
            producer=PRODUCER,
        )
    )
    client.emit(
        JobEvent(
            eventTime=t0.isoformat(),
            job=Job(namespace="training", name="eval-fin"),
            inputs=[InputDataset(namespace="warehouse", name="fin-qa-holdout")],
            outputs=[OutputDataset(namespace="warehouse", name="fin-eval-report")],
            producer=PRODUCER,
        )
    )
    print(uuid.UUID(args.run_id))


if __name__ == "__main__":
    main()
