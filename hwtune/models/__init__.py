"""Data models: hardware facts (`hardware`) and plans (`profile`). Import-light by design."""
