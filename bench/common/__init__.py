"""Provides what the benchmark families share: trees and results (`trees`), statistics
(`stats`), reports (`report`), the testbed's hosts (`hosts`) and Pilot helpers (`pilot`)."""
