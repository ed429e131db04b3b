"""aucstream service: hosts ``models`` learners behind HTTP, durable in Redis or SQLite."""
