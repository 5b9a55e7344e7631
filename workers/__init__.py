"""Worker assembly: Temporal client, task queue, activities and the `chatd worker` process."""
