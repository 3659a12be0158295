"""HTML and HTMX views of labeling, by topic: the labeling surface's writes and partials
(``labels``), queues, review (adjudication) and schemas."""
