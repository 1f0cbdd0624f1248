"""The read side: the queries and derived figures the pages, the JSON API and the reports show,
one module per resource. Nothing here writes; the loop and the actions do."""
